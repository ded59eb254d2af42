"""JobSocket: SubmitStore / SubmitLoad job frames written without waiting for the answer.

An engine submits its jobs on its step. The daemon's part of a submit (its checks, pinning the
blocks in L1, handing the job to its transfer engine: ~220 µs for 512 blocks on an H100 host,
bench/results/h100-2026-11-23-engine-jobs/NOTES.md) need not be on that path, so send() returns
once the frame is written to the daemon's fast-path socket (docs/wire-protocol.md, "Job
frames"). The JobSocket keeps a connection of its own for that (lookups use another), and a
reader thread per connection reads the daemon's answers. One connection is served by one daemon
thread, frame after frame, so the answers come in the order the frames were written: each is
handed, with the SentJob that send() got, to `on_answer(job, status, daemon_job_id, message)`
(status 0 = accepted, else the gRPC status code number of the refusal and its message). Between
the answers may come completion frames (the jobs of version-2 frames, which may finish before
their answer is read): each is handed to `on_completion(SocketCompletion)` (the daemon's job id;
the session maps it).

A thread that waits for its jobs may read the connection itself (reading()): the reader
thread hands its role over and sleeps until the waiter is done. The completion then wakes
the thread that waits for it directly, instead of waking the reader thread, which files it
and wakes the waiter: on a virtual machine each wake-up of a thread that slept through a job
costs 0.05-0.2 ms (bench/results/h100-2026-11-25-wakeups/NOTES.md). One thread reads at a time,
frame by whole frame, so answers and completions are filed in order whoever reads them.

A connection that breaks (the daemon died, or closed it) hands every job whose answer was
not read to `on_lost(jobs, error)`, once, and the next send() connects again. So does a
connection whose oldest unanswered frame waited `timeout` seconds. A daemon that predates
job frames answers with a lookup frame's magic: its connection is dropped the same way
(error: NotSpoken) and `spoken` turns False (the session then submits through gRPC).
The callbacks run in the thread that reads (or in a sender's thread when its write failed),
never under the JobSocket's locks. A completion frame whose sizes cannot be trusted breaks
the connection like a torn answer; completions of jobs already answered then come through
the session's completion stream (the daemon queues what it cannot write).
"""
from __future__ import annotations

import logging
import os
import select
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Deque, List, Optional, Tuple

import grpc

from .errors import DaemonUnavailable
from .fast_path import (ANSWER_BYTES, COMPLETION_BYTES, COMPLETION_MAGIC, MAGIC,
                        MAX_MESSAGE_BYTES, NotSpoken, SocketCompletion, completion,
                        completion_tail_bytes, job_answer)

log = logging.getLogger("kvstrata")
_COMPLETION_MAGIC_BYTES = COMPLETION_MAGIC.to_bytes(4, "little")
# How soon the reader thread takes its role back after a waiting thread's turn ended.
_HANDBACK_S = 0.005


@dataclass(eq=False)
class SentJob:
    """What the session needs to file a job frame's answer."""
    job_id: int        # the client's id for the job (kvstrata.job_ids)
    tag: int           # the session generation's tag that id carries
    kind: int          # pb.JobCompletion.KIND_STORE / KIND_LOAD
    num_blocks: int
    session_id: int
    sent_at: float = 0.0  # time.monotonic() when its frame was handed to the socket


AnswerFn = Callable[[SentJob, int, int, str], None]
LostFn = Callable[[List[SentJob], BaseException], None]
CompletionFn = Callable[[SocketCompletion], None]


class _Link:
    """One connection: its socket, the jobs whose answers are still to be read, and who
    reads it (the link's reader thread, or a thread waiting for its jobs: see reading())."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.unanswered: Deque[SentJob] = deque()
        self.broken = False
        # The reader thread sleeps in poll() on the socket and on this pipe; a waiting thread
        # that wants to read writes a byte to it (JobSocket.reading).
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        self.reader: Optional[int] = None  # threading.get_ident() of the thread reading, if any
        self.reader_thread: Optional[int] = None  # the link's own reader thread's, once it runs
        self.wanted = 0                    # waiting threads that asked for the reader's role

    def close(self) -> None:
        self.sock.close()
        os.close(self.wake_r)
        os.close(self.wake_w)


class _Closed(Exception):
    """The daemon closed the connection between two frames."""


# What a reader (the reader thread, or a waiting thread's Reading) ends the connection for.
_CONNECTION_ERRORS = (_Closed, OSError, ConnectionError, TimeoutError, NotSpoken)


class Reading:
    """A waiting thread's turn as its connection's reader (JobSocket.reading()).

    `active` is False when the turn could not be had (no connection, another thread reads,
    or the reader thread did not hand over in time) or ended (the connection broke): the
    caller then waits for its completions the usual way."""

    def __init__(self, owner: "JobSocket", link: Optional[_Link]) -> None:
        self._owner = owner
        self._link = link
        self._poll: Optional[Any] = None
        if link is not None:
            self._poll = select.poll()
            self._poll.register(link.sock.fileno(), select.POLLIN)

    @property
    def active(self) -> bool:
        return self._link is not None and not self._link.broken

    def read_for(self, seconds: float) -> None:
        """Reads and files the frames that arrive within `seconds` (returns after the first
        one, or when the time is up); a connection error breaks the connection as its
        reader thread would (on_lost gets the unanswered jobs) and ends the turn."""
        self._read_when(lambda poll: poll.poll(max(0, int(seconds * 1000 + 0.999))))

    def spin_for(self, seconds: float) -> None:
        """read_for without sleeping: polls the socket over and over (each poll lets the
        GIL go) for at most `seconds`, for a frame due about now (kvstrata.job_pace)."""
        end = time.monotonic() + seconds

        def ready(poll: Any) -> bool:
            while not poll.poll(0):
                if time.monotonic() >= end:
                    return False
            return True
        self._read_when(ready)

    def _read_when(self, ready: Callable[[Any], Any]) -> None:
        """Reads and files one frame if `ready(poll object)` says the socket has one."""
        link = self._link
        if link is None or link.broken:
            return
        try:
            if ready(self._poll):
                self._owner._read_frame(link)
        except _CONNECTION_ERRORS as err:
            self._owner._fail(link, err)

    def end(self) -> None:
        """Hands the role back to the connection's reader thread."""
        link, self._link = self._link, None
        if link is not None:
            self._owner._release(link)


class JobSocket:
    """See the module docstring. Thread-safe: frames from several threads are written one
    at a time, whole."""

    def __init__(self, path: str, timeout: Optional[float], on_answer: AnswerFn,
                 on_lost: LostFn, on_completion: Optional[CompletionFn] = None) -> None:
        self.path = path
        self.timeout = timeout
        self.on_answer = on_answer
        self.on_lost = on_lost
        self.on_completion = on_completion
        self.spoken = True   # False once the daemon answered a frame as a lookup frame
        # Held while writing; only its holder uses a socket to send.
        self._send_lock = threading.Lock()
        # Guards _link and every link's unanswered, broken, reader and wanted.
        self._lock = threading.Lock()
        self._role = threading.Condition(self._lock)  # a link's reader role changed hands
        self._link: Optional[_Link] = None
        self._closed = False

    # ------------------------------------------------------------------ sending

    def send(self, frame: bytes, job: SentJob) -> None:
        """Write the frame; returns once it is written (the answer goes to on_answer, or
        on_lost). DaemonUnavailable when it could not be written: then nothing reaches a
        callback for this job. A kept connection that fails on writing is one to a daemon
        that went away (a restart): the frame is written once more on a new connection."""
        lost: List[List[SentJob]] = []
        error: BaseException = ConnectionResetError("the connection broke before the write")
        try:
            with self._send_lock:
                for _ in range(3):
                    link, fresh = self._current()
                    with self._lock:
                        if link.broken:
                            continue  # Broken by its reader meanwhile: connect again.
                        job.sent_at = time.monotonic()
                        link.unanswered.append(job)
                    try:
                        link.sock.sendall(frame)
                        return
                    except OSError as err:
                        error = err
                        orphans = self._break(link)
                        lost.append([j for j in orphans if j is not job])
                        if not any(j is job for j in orphans):
                            return  # The reader found the break first: on_lost has the job.
                        if fresh:
                            break
                raise DaemonUnavailable(grpc.StatusCode.UNAVAILABLE,
                                        f"fast-path socket {self.path}: {error}", self.path)
        finally:
            for jobs in lost:
                self._report_lost(jobs, error)

    def _current(self) -> Tuple[_Link, bool]:
        """The open connection (and whether it is new); connects when there is none.
        Call holding _send_lock."""
        with self._lock:
            if self._closed:
                raise DaemonUnavailable(grpc.StatusCode.UNAVAILABLE,
                                        "the job socket was closed", self.path)
            link = self._link
        if link is not None and not link.broken:
            return link, False
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.path)
            link = _Link(sock)
        except OSError as err:
            sock.close()
            raise DaemonUnavailable(grpc.StatusCode.UNAVAILABLE,
                                    f"fast-path socket {self.path}: {err}", self.path) from None
        with self._lock:
            self._link = link
        threading.Thread(target=self._read, args=(link,), daemon=True,
                         name="kvstrata-job-answers").start()
        return link, True

    def _break(self, link: _Link) -> List[SentJob]:
        """Mark the connection broken and wake its reader; the jobs still unanswered
        (whoever gets them reports them: exactly once)."""
        with self._lock:
            if link.broken:
                return []
            link.broken = True
            orphans = list(link.unanswered)
            link.unanswered.clear()
            self._role.notify_all()  # Threads waiting for the reader's role give up.
        try:
            link.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        return orphans

    def close(self) -> None:
        """Drop the connection; jobs still unanswered go to on_lost."""
        with self._lock:
            self._closed = True
            link = self._link
        if link is not None:
            self._report_lost(self._break(link), ConnectionAbortedError("the session was closed"))

    @property
    def unanswered(self) -> int:
        """How many written frames still wait for their answer."""
        with self._lock:
            link = self._link
            return len(link.unanswered) if link is not None and not link.broken else 0

    # ------------------------------------------------------------------ the reader

    def reading(self, limit: float) -> Reading:
        """The calling thread's turn as the connection's reader, for a thread about to wait
        for its jobs' completions: it then reads them itself (Reading.read_for) instead of
        being woken by the reader thread once that thread has read and filed them, one
        thread's wake-up less on the way of every completion. The reader thread is asked to
        hand over (a byte on its wake pipe) and is waited for at most `limit` seconds; the
        turn is inactive when there is no connection or another thread has it. End it
        (Reading.end) once the wait is over: the reader thread reads on."""
        me = threading.get_ident()
        with self._role:
            link = self._link
            if link is None or link.broken or link.reader == me:
                return Reading(self, None)
            link.wanted += 1
            try:
                if link.reader is not None and link.reader == link.reader_thread:
                    try:
                        os.write(link.wake_w, b"w")
                    except BlockingIOError:
                        pass  # Bytes are waiting there already.
                deadline = time.monotonic() + limit
                while link.reader is not None and not link.broken:
                    if link.reader != link.reader_thread:
                        return Reading(self, None)  # Another waiting thread reads.
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return Reading(self, None)
                    self._role.wait(left)
                if link.broken:
                    return Reading(self, None)
                link.reader = me
            finally:
                link.wanted -= 1
        return Reading(self, link)

    def _release(self, link: _Link) -> None:
        """The reader's role is free again: threads asking for it (reading()) are woken. A
        waiting thread's turn ends unnoticed by the reader thread, which takes the role back
        within _HANDBACK_S: a thread that waits again before then (an engine submitting and
        waiting step after step) takes it with no hand-over, and the reader thread's wake-up
        does not compete for the GIL with the caller's next submit."""
        with self._role:
            link.reader = None
            if link.wanted:
                self._role.notify_all()

    def _fail(self, link: _Link, error: BaseException) -> None:
        """A reader found the connection unusable: break it and report its unanswered jobs
        (once; its reader thread closes the socket when no thread reads it any more)."""
        if isinstance(error, _Closed):
            error = ConnectionResetError("the daemon closed the connection")
        self._report_lost(self._break(link), error)

    def _read(self, link: _Link) -> None:
        """The reader thread of `link`: reads whenever no waiting thread does (reading()),
        sleeping in poll() on the socket and its wake pipe; closes the socket at the end."""
        me = threading.get_ident()
        with self._role:
            link.reader_thread = me
        poller = select.poll()
        poller.register(link.sock.fileno(), select.POLLIN)
        poller.register(link.wake_r, select.POLLIN)
        timeout_ms = None if self.timeout is None else max(1, int(self.timeout * 1000))
        try:
            while True:
                with self._role:
                    while (link.reader is not None or link.wanted) and not link.broken:
                        self._role.wait(_HANDBACK_S)
                    if link.broken:
                        break
                    link.reader = me
                try:
                    while True:
                        ready = {fd for fd, _ in poller.poll(timeout_ms)}
                        if link.sock.fileno() in ready:
                            self._read_frame(link)
                        elif not ready and self._overdue(link):
                            raise TimeoutError(f"no answer from {self.path} within "
                                               f"{self.timeout} s")
                        if link.wake_r in ready:
                            try:
                                os.read(link.wake_r, 64)
                            except BlockingIOError:
                                pass
                        with self._role:
                            if link.wanted or link.broken:
                                break
                except _CONNECTION_ERRORS as err:
                    self._fail(link, err)
                finally:
                    self._release(link)
        finally:
            self._fail(link, ConnectionResetError("the daemon closed the connection"))
            with self._role:
                while link.reader is not None:  # A waiting thread still reads: let it end.
                    self._role.wait(_HANDBACK_S)
            with self._send_lock:  # No sender uses the socket now: closing cannot hit a reused fd.
                link.close()

    def _read_frame(self, link: _Link) -> None:
        """Reads one frame and hands it to its callback. _Closed at the end of the stream
        before it; ConnectionError / NotSpoken / OSError when the connection cannot go on."""
        head = self._recv(link, ANSWER_BYTES)
        if head is None:
            raise _Closed()
        if head[:4] == _COMPLETION_MAGIC_BYTES:
            self._read_completion(link, head)
            return
        # An answer often comes while a sender still waits in sendall() to get the GIL back
        # (its frame woke the daemon): let it return first, then file it.
        with self._send_lock:
            pass
        magic, status, daemon_job_id, size = job_answer(head)
        if magic != MAGIC:
            self.spoken = False
            raise NotSpoken(f"{self.path} answered a job frame with magic "
                            f"0x{magic:08x}: the daemon predates job frames")
        if size > MAX_MESSAGE_BYTES:
            raise ConnectionError(f"a job answer of {size} message bytes")
        message = self._recv(link, size) if size else b""
        if message is None:
            raise ConnectionResetError("the daemon closed the connection mid-answer")
        with self._lock:
            job = link.unanswered.popleft() if link.unanswered else None
        if job is None:
            if link.broken:
                raise _Closed()
            raise ConnectionError("an answer for a frame that was not written")
        try:
            self.on_answer(job, status, daemon_job_id, message.decode("utf-8", "replace"))
        except Exception:  # noqa: BLE001 - never let a callback's failure break the reader
            log.exception("kvstrata: filing a job frame's answer failed")

    def _read_completion(self, link: _Link, head: bytes) -> None:
        """The rest of a completion frame whose first ANSWER_BYTES are `head`; hands it to
        on_completion. ConnectionError when the frame cannot be trusted or is torn."""
        rest = self._recv(link, COMPLETION_BYTES - ANSWER_BYTES)
        if rest is None:
            raise ConnectionResetError("the daemon closed the connection mid-completion")
        header = head + rest
        try:
            size = completion_tail_bytes(header)
        except ValueError as err:
            raise ConnectionError(str(err)) from None
        tail = self._recv(link, size) if size else b""
        if tail is None:
            raise ConnectionResetError("the daemon closed the connection mid-completion")
        if self.on_completion is None:
            return
        try:
            self.on_completion(completion(header, tail))
        except Exception:  # noqa: BLE001 - never let anything escape this thread
            log.exception("kvstrata: filing a job completion from the socket failed")

    def _recv(self, link: _Link, size: int) -> Optional[bytes]:
        """size bytes, or None at the end of the stream before the first of them."""
        got = bytearray()
        while len(got) < size:
            try:
                chunk = link.sock.recv(size - len(got))
            except socket.timeout:
                if self._overdue(link):
                    raise TimeoutError(f"no answer from {self.path} within "
                                       f"{self.timeout} s") from None
                continue
            if not chunk:
                if got:
                    raise ConnectionResetError("the daemon closed the connection mid-answer")
                return None
            got += chunk
        return bytes(got)

    def _overdue(self, link: _Link) -> bool:
        with self._lock:
            if link.broken:
                return True
            return (bool(link.unanswered) and self.timeout is not None
                    and time.monotonic() - link.unanswered[0].sent_at > self.timeout)

    def _report_lost(self, jobs: List[SentJob], error: BaseException) -> None:
        if not jobs:
            return
        try:
            self.on_lost(jobs, error)
        except Exception:  # noqa: BLE001 - a callback's failure must not break the caller
            log.exception("kvstrata: reporting lost job frames failed")
