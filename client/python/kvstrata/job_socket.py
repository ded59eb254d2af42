"""JobSocket: SubmitStore / SubmitLoad job frames written without waiting for the answer.

An engine submits its jobs on its step. The daemon's part of a submit (its checks, pinning
the blocks in L1, handing the job to its transfer engine: ~220 µs for 512 blocks on an
H100 host, bench/RESULTS.md "Engine jobs") need not be on that path, so send() returns
once the frame is written to the daemon's fast-path socket (docs/wire-protocol.md, "Job
frames"). The JobSocket keeps a connection of its own for that (lookups use another), and a
reader thread per connection reads the daemon's answers. One connection is served by one
daemon thread, frame after frame, so the answers come in the order the frames were
written: each is handed, with the SentJob that send() got, to
`on_answer(job, status, daemon_job_id, message)` (status 0 = accepted, else the gRPC
status code number of the refusal and its message). Between the answers may come completion
frames (the jobs of version-2 frames, which may finish before their answer is read): each is
handed to `on_completion(SocketCompletion)` (the daemon's job id; the session maps it).

A connection that breaks (the daemon died, or closed it) hands every job whose answer was
not read to `on_lost(jobs, error)`, once, and the next send() connects again. So does a
connection whose oldest unanswered frame waited `timeout` seconds. A daemon that predates
job frames answers with a lookup frame's magic: its connection is dropped the same way
(error: NotSpoken) and `spoken` turns False (the session then submits through gRPC).
The callbacks run in the reader thread (or in a sender's thread when its write failed),
never under the JobSocket's locks. A completion frame whose sizes cannot be trusted breaks
the connection like a torn answer; completions of jobs already answered then come through
the session's completion stream (the daemon queues what it cannot write).
"""
from __future__ import annotations

import logging
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Deque, List, Optional, Tuple

import grpc

from .errors import DaemonUnavailable
from .fast_path import (ANSWER_BYTES, COMPLETION_BYTES, COMPLETION_MAGIC, MAGIC,
                        MAX_MESSAGE_BYTES, NotSpoken, SocketCompletion, completion,
                        completion_tail_bytes, job_answer)

log = logging.getLogger("kvstrata")
_COMPLETION_MAGIC_BYTES = COMPLETION_MAGIC.to_bytes(4, "little")


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
    """One connection: its socket and the jobs whose answers are still to be read."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.unanswered: Deque[SentJob] = deque()
        self.broken = False


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
        self._send_lock = threading.Lock()  # held while writing; only its holder uses a socket to send
        self._lock = threading.Lock()       # guards _link and every link's unanswered/broken
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
        except OSError as err:
            sock.close()
            raise DaemonUnavailable(grpc.StatusCode.UNAVAILABLE,
                                    f"fast-path socket {self.path}: {err}", self.path) from None
        link = _Link(sock)
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

    def _read(self, link: _Link) -> None:
        error: BaseException = ConnectionResetError("the daemon closed the connection")
        try:
            while True:
                head = self._recv(link, ANSWER_BYTES)
                if head is None:
                    break
                if head[:4] == _COMPLETION_MAGIC_BYTES:
                    self._read_completion(link, head)
                    continue
                # An answer often comes while a sender still waits in sendall() to get the
                # GIL back (its frame woke the daemon): let it return first, then file it.
                with self._send_lock:
                    pass
                magic, status, daemon_job_id, size = job_answer(head)
                if magic != MAGIC:
                    self.spoken = False
                    error = NotSpoken(f"{self.path} answered a job frame with magic "
                                      f"0x{magic:08x}: the daemon predates job frames")
                    break
                if size > MAX_MESSAGE_BYTES:
                    error = ConnectionError(f"a job answer of {size} message bytes")
                    break
                message = self._recv(link, size) if size else b""
                if message is None:
                    error = ConnectionResetError("the daemon closed the connection mid-answer")
                    break
                with self._lock:
                    job = link.unanswered.popleft() if link.unanswered else None
                if job is None:
                    if link.broken:
                        break
                    error = ConnectionError("an answer for a frame that was not written")
                    break
                try:
                    self.on_answer(job, status, daemon_job_id,
                                   message.decode("utf-8", "replace"))
                except Exception:  # noqa: BLE001 - never let anything escape this thread
                    log.exception("kvstrata: filing a job frame's answer failed")
        except OSError as err:
            error = err
        finally:
            orphans = self._break(link)
            with self._send_lock:  # No sender uses the socket now: closing cannot hit a reused fd.
                link.sock.close()
            self._report_lost(orphans, error)

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
