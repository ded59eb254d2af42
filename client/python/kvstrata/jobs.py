"""GPU jobs: completions of SubmitStore / SubmitLoad without blocking the engine thread.

A CompletionTracker keeps one WatchCompletions stream open per session and a background
thread that files every JobCompletion it delivers into a table keyed by job id. The engine
thread then either takes what has finished (`take()`, no RPC, never blocks) or waits for
particular jobs (`wait()`). PollCompletions is used as a safety net: while waiting, once
per `poll_interval` with a healthy stream, and with a short back-off when the stream is
not available (e.g. a daemon that answers WatchCompletions with UNIMPLEMENTED), so a
completion delivered to either path is seen exactly once.

Jobs submitted as job frames (kvstrata.job_socket) return before the daemon answered: their
ids are the client's (kvstrata.job_ids), sent() registers one before its frame is written,
answered() maps it to the daemon's id once the answer is read (completions that arrive
first are held meanwhile), delivered() files a completion the job socket read (version-2
frames: the daemon writes their completions there, not to the stream), and refused() files a failed completion (every block failed,
the daemon's message in `error`) for a frame the daemon refused or that a broken
connection left unanswered.

Daemon restarts (see Session(auto_reconnect=True)): the tracker remembers the jobs it was
told about (expect()) until their completion arrives; fail_pending() files a failed
completion (every block in failed_blocks) for each of them, so waiters never hang on jobs
of a daemon that is gone. rebind() moves the tracker to the session opened on the new
daemon; job ids of later sessions carry a generation tag in bits 48..62 (job_ids.job_tag) so
they never collide with ids of an earlier daemon.

SessionJobs is the part of kvstrata.Session that owns its tracker: completions(),
poll_completions(), take_completions(), wait_jobs(); the jobs themselves are submitted by
kvstrata.gpu_io (expect(), `tracker`). It is given the session's Connection and hears of
lost, resumed and replaced sessions as a kvstrata.session_part.SessionPart.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import grpc

from . import pb
from .errors import KVStrataError, session_unknown
# job_tag, JOB_TAG_MASK: also kvstrata.jobs's names for them.
from .job_ids import HELD, JOB_TAG_MASK, JobIdMap, RecentIds, job_tag  # noqa: F401
from .job_pace import SPIN_EARLY_S, SPIN_S, JobPace, read_turn
from .session_part import SessionPart

log = logging.getLogger("kvstrata")

_MIN_POLL_BACKOFF_S = 0.0005
_MAX_POLL_BACKOFF_S = 0.02
# wait() wakes this often for its first _WARM_LIMIT_S: a thread that slept for a whole job
# (tens of ms) wakes 0.1-0.2 ms later on a virtual machine than one that slept 1 ms
# (bench/gpu/wake_probe.py). The job socket's reader thread does not: its wake-ups would
# take the GIL from the engine's thread.
_WARM_WAIT_S = 0.001
_WARM_LIMIT_S = 5.0
# How long a waiting thread waits for the job socket's reader thread to hand over its role.
_READER_HANDOVER_S = 0.1
_LOST_CODES = (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.UNAVAILABLE)


class CompletionTracker:
    """Collects the JobCompletions of one session (see the module docstring).

    Thread-safe. `client` is a kvstrata.Client, `session_id` the session's id.
    """

    def __init__(self, client: Any, session_id: int, poll_interval: float = 1.0,
                 on_lost: Optional[Callable[[BaseException, int], None]] = None,
                 tag: int = 0) -> None:
        self.client = client
        self.session_id = session_id
        self.poll_interval = poll_interval
        # Called (outside the tracker's lock) with the error and the session id when the
        # stream or a poll finds the daemon or the session gone (UNAVAILABLE, NOT_FOUND).
        self.on_lost = on_lost
        self.tag = tag             # added to the daemon's job ids (see job_tag)
        self._epoch = 0            # bumped by rebind(): stale streams file nothing
        self._pending: Dict[int, Tuple[int, int]] = {}  # job id -> (kind, number of blocks)
        self._sent_at: Dict[int, float] = {}  # job-frame job id -> time.monotonic() of sent()
        self._pace = JobPace()
        # How long wait() polls the job socket without sleeping after a job was due (0: never).
        self.spin_s = SPIN_S
        self._ids = JobIdMap()     # client ids of job-frame submits <-> the daemon's ids
        self._want_stream = False
        self.watch_error: Optional[BaseException] = None  # why the stream ended, if it did
        self.poll_error: Optional[BaseException] = None   # last failed PollCompletions
        self._cond = threading.Condition()
        self._done: Dict[int, Any] = {}
        self._taken = RecentIds()
        self._stream: Any = None
        self._thread: Optional[threading.Thread] = None
        self._watching = False
        self._closed = False

    # ------------------------------------------------------------------ stream

    @property
    def watching(self) -> bool:
        """True while the WatchCompletions stream is open."""
        return self._watching

    def start(self) -> None:
        """Open the WatchCompletions stream and its reader thread (idempotent)."""
        with self._cond:
            self._want_stream = True
            if self._closed or self._thread is not None:
                return
            try:
                self._stream = self.client.watch_completions(session_id=self.session_id)
            except KVStrataError as err:
                self.watch_error = err
                return
            self._watching = True
            self._thread = threading.Thread(target=self._read_stream,
                                            args=(self._stream, self._epoch, self.session_id),
                                            daemon=True,
                                            name=f"kvstrata-completions-{self.session_id}")
            self._thread.start()

    def _read_stream(self, stream: Any, epoch: int, session_id: int) -> None:
        try:
            for completion in stream:
                self._add((completion,), epoch)
        except Exception as err:  # Never let anything escape this thread.
            if epoch != self._epoch:
                return  # Rebound meanwhile: this stream's end is old news.
            self.watch_error = err
            lost = isinstance(err, KVStrataError) and err.code in _LOST_CODES
            if lost and self.on_lost is not None and not self._closed:
                log.debug("kvstrata session %d: completion stream ended: %s", session_id, err)
                try:
                    self.on_lost(err, session_id)
                except Exception:  # noqa: BLE001 - never escape the thread
                    log.exception("kvstrata: on_lost handler failed")
            elif not self._closed:
                level = logging.DEBUG if (isinstance(err, KVStrataError) and
                                          err.code == grpc.StatusCode.UNIMPLEMENTED) else logging.WARNING
                log.log(level, "kvstrata session %d: completion stream ended: %s",
                        session_id, err)
        finally:
            with self._cond:
                if epoch == self._epoch:
                    self._watching = False
                self._cond.notify_all()

    # ------------------------------------------------------------------ daemon restarts

    def expect(self, job_id: int, kind: int, num_blocks: int, tag: Optional[int] = None) -> None:
        """Remember a submitted job (its tagged id) until its completion arrives, so that
        fail_pending() can report it. tag: the tag its id was made with; a job of an
        earlier tag (the tracker was rebound meanwhile) is failed at once."""
        with self._cond:
            job_id = int(job_id)
            if tag is not None and tag != self.tag:
                self._done.setdefault(job_id, self._failure(
                    job_id, kind, num_blocks, "the session was lost while submitting"))
                self._cond.notify_all()
            elif job_id not in self._done and job_id not in self._taken:
                self._pending[job_id] = (int(kind), int(num_blocks))

    @staticmethod
    def _failure(job_id: int, kind: int, num_blocks: int, reason: str) -> Any:
        return pb.JobCompletion(job_id=job_id, kind=kind, ok=False,
                                failed_blocks=range(num_blocks), error=reason)

    def pending(self) -> List[int]:
        """Ids of the expected jobs whose completion did not arrive yet."""
        with self._cond:
            return list(self._pending)

    def fail_pending(self, reason: str) -> int:
        """File a failed completion (every block failed) for each job still pending;
        answers how many. Waiters wake up and get them."""
        with self._cond:
            pending, self._pending = self._pending, {}
            self._sent_at.clear()
            for job_id, (kind, n) in pending.items():
                if job_id not in self._done and job_id not in self._taken:
                    self._done[job_id] = self._failure(job_id, kind, n, reason)
            if pending:
                self._cond.notify_all()
        return len(pending)

    # ------------------------------------------------------------------ job frames

    def sent(self, job_id: int, kind: int, num_blocks: int, tag: int) -> None:
        """A job frame is about to be written for client job id job_id (made with tag):
        expected like expect(), and its completion may arrive before the daemon's answer."""
        with self._cond:
            self.expect(job_id, kind, num_blocks, tag)
            if tag == self.tag:
                self._ids.sent(int(job_id))
                self._sent_at[int(job_id)] = time.monotonic()

    def answered(self, job_id: int, tag: int, daemon_job_id: int) -> None:
        """The daemon accepted the frame of job_id as its job daemon_job_id."""
        with self._cond:
            if tag != self.tag:
                return  # A job of an earlier session: reported failed by rebind().
            held = self._ids.answered(int(job_id), int(daemon_job_id))
            if held is not None:  # Its completion came first.
                held.job_id = int(job_id)
                self._file(int(job_id), held)
            self._release_held()
            self._cond.notify_all()  # Waiters, and daemon_job_id() too.

    def refused(self, job_id: int, tag: int, kind: int, num_blocks: int, reason: str) -> bool:
        """The frame of job_id was refused (or never answered): file its failed completion
        (every block failed, `error` = reason). False when it was reported already."""
        job_id = int(job_id)
        with self._cond:
            if tag == self.tag:
                self._ids.settled(job_id)
                self._release_held()
            filed = bool(self._file(job_id, self._failure(job_id, kind, num_blocks, reason)))
            self._cond.notify_all()
        return filed

    def delivered(self, session_id: int, c: Any) -> None:
        """A JobCompletion (the daemon's job id) that came on the job socket: filed as the
        stream's are; dropped when it is of another session (one of an earlier daemon)."""
        with self._cond:
            if session_id != self.session_id:
                return
            epoch = self._epoch
        self._add((c,), epoch)

    def withdraw(self, job_id: int) -> None:
        """Forget a job whose frame could not be written (the submit raised instead)."""
        with self._cond:
            self._pending.pop(int(job_id), None)
            self._sent_at.pop(int(job_id), None)
            self._ids.settled(int(job_id))
            self._release_held()
            self._cond.notify_all()

    def daemon_job_id(self, job_id: int, timeout: Optional[float] = None) -> Optional[int]:
        """The daemon's id for a job-frame job, waiting up to timeout for its answer; None
        when it has none (refused, lost, unknown, or no answer in time)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._ids.unanswered(int(job_id)) and not self._closed:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                self._cond.wait(left)
            return self._ids.daemon_id(int(job_id))

    def rebind(self, session_id: int, tag: int, reason: str = "the daemon restarted",
               fail: bool = True) -> None:
        """Follow the session to a new daemon session: fail what is still pending (unless
        fail=False: the same session, e.g. to reopen a lost stream), drop the old stream and
        open one for `session_id` if one was open before."""
        if fail:
            self.fail_pending(reason)
        with self._cond:
            self._epoch += 1
            if fail:
                self._ids.clear()  # Ids of the earlier session (and daemon).
            self.session_id = session_id
            self.tag = tag
            stream, self._stream = self._stream, None
            self._thread = None
            self._watching = False
            self.watch_error = None
            want = self._want_stream and not self._closed
            self._cond.notify_all()
        if stream is not None:
            stream.cancel()
        if want:
            self.start()

    def close(self) -> None:
        """Cancel the stream and stop the reader thread; pending waits time out."""
        with self._cond:
            self._closed = True
            stream, self._stream = self._stream, None
            self._cond.notify_all()
        if stream is not None:
            stream.cancel()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=2.0)

    # ------------------------------------------------------------------ table

    def _add(self, completions: Iterable[Any], epoch: Optional[int] = None) -> int:
        added = 0
        with self._cond:
            if epoch is not None and epoch != self._epoch:
                return 0  # From a session of an earlier daemon.
            for c in completions:
                client_id = self._ids.route(int(c.job_id), c)
                if client_id == HELD:
                    continue  # Its job frame's answer is not read yet: filed by answered().
                if client_id is None:
                    added += self._file_daemon(c)
                else:
                    c.job_id = client_id
                    added += self._file(client_id, c)
            if added:
                self._cond.notify_all()
        return added

    def _file_daemon(self, c: Any) -> int:
        """File a completion of a job submitted through gRPC (id: the daemon's + the tag)."""
        job_id = int(c.job_id) | self.tag
        if self.tag:
            c.job_id = job_id
        return self._file(job_id, c)

    def _file(self, job_id: int, c: Any) -> int:
        """1 when c is filed under job_id; 0 for a second delivery (call under the lock)."""
        expected = self._pending.pop(job_id, None)
        sent_at = self._sent_at.pop(job_id, None)
        if job_id in self._taken or job_id in self._done:
            return 0
        if expected is not None and sent_at is not None and getattr(c, "ok", False):
            self._pace.learn(expected[0], expected[1], time.monotonic() - sent_at)
        self._done[job_id] = c
        return 1

    def _release_held(self) -> int:
        """File the held completions no answer can claim any more (call under the lock)."""
        added = sum(self._file_daemon(c) for c in self._ids.release())
        if added:
            self._cond.notify_all()
        return added

    def _due(self, job_ids: List[int]) -> Optional[float]:
        """When the first of these job-frame jobs is due at the pace of earlier ones
        (time.monotonic()); None when none can be told (call under the lock)."""
        due = None
        for job_id in job_ids:
            sent_at, expected = self._sent_at.get(job_id), self._pending.get(job_id)
            if sent_at is None or expected is None:
                continue
            after = self._pace.due(*expected)
            if after is not None and (due is None or sent_at + after < due):
                due = sent_at + after
        return due

    def _pop(self, job_id: int) -> Any:
        self._taken.add(job_id)
        return self._done.pop(job_id)

    def take(self) -> Dict[int, Any]:
        """Every completion received and not yet taken, by job id; no RPC, never blocks."""
        with self._cond:
            return {job_id: self._pop(job_id) for job_id in list(self._done)}

    def done(self, job_id: int) -> bool:
        """True when the job's completion arrived and was not taken yet."""
        with self._cond:
            return int(job_id) in self._done

    def poll(self, max_completions: int = 0) -> List[Any]:
        """One PollCompletions RPC, then take(): everything finished and not yet taken."""
        with self._cond:
            epoch, session_id = self._epoch, self.session_id
        r = self.client.poll_completions(session_id=session_id,
                                         max_completions=max_completions)
        self._add(r.completions, epoch)
        return list(self.take().values())

    def _poll_quietly(self, ids: List[int]) -> None:
        with self._cond:
            epoch, session_id = self._epoch, self.session_id
        try:
            r = self.client.poll_completions(session_id=session_id)
        except KVStrataError as err:
            self.poll_error = err
            if err.code in _LOST_CODES:
                if self.on_lost is not None:
                    self.on_lost(err, session_id)  # May fail the pending jobs.
                    with self._cond:
                        if epoch != self._epoch or all(j in self._done for j in ids):
                            return  # Rebound, or the waited jobs were reported failed.
                raise  # The session (or the daemon) is gone: waiting longer cannot help.
            return
        self._add(r.completions, epoch)

    def wait(self, job_ids: Iterable[int], timeout: Optional[float] = None,
             reader: Optional[Callable[[float], Any]] = None) -> Dict[int, Any]:
        """Block until every job in job_ids completed; returns (and takes) their completions.

        TimeoutError (naming the missing ids) when `timeout` seconds pass first; the
        completions that did arrive stay in the table. KVStrataError when the session or
        the daemon is gone. reader: the session's job socket's JobSocket.reading, when its
        completions come there: this thread then reads them itself while it waits.
        """
        ids = list(dict.fromkeys(int(j) for j in job_ids))
        deadline = None if timeout is None else time.monotonic() + timeout
        spin_at = spin_end = None  # When this thread polls its job socket without sleeping.
        if reader is not None and self.spin_s > 0:
            with self._cond:
                due = self._due(ids)
            if due is not None:
                spin_at, spin_end = due - SPIN_EARLY_S, due + self.spin_s
        warm_until = time.monotonic() + _WARM_LIMIT_S
        backoff = _MIN_POLL_BACKOFF_S
        next_poll = time.monotonic() + (self.poll_interval if self._watching else 0.0)
        turn: Any = None  # This thread's turn as the job socket's reader (a job_socket.Reading).
        try:
            while True:
                with self._cond:
                    missing = [j for j in ids if j not in self._done]
                    if not missing:
                        return {j: self._pop(j) for j in ids}
                    if self._closed:
                        raise KVStrataError(grpc.StatusCode.CANCELLED,
                                            "the session was closed while waiting for jobs")
                    stale = [j for j in missing if (j & JOB_TAG_MASK) != self.tag
                             and j not in self._pending]
                    if stale:
                        raise KVStrataError(grpc.StatusCode.NOT_FOUND,
                                            f"job {stale[0]} belongs to a session of an earlier "
                                            "daemon (its failure was already handed out)")
                    now = time.monotonic()
                    if not self._watching and next_poll - now > _MAX_POLL_BACKOFF_S:
                        next_poll = now  # The stream ended while we waited: poll from now on.
                    if deadline is not None and now >= deadline:
                        shown = ", ".join(str(j) for j in missing[:8])
                        more = f" and {len(missing) - 8} more" if len(missing) > 8 else ""
                        raise TimeoutError(f"kvstrata: jobs {shown}{more} did not complete "
                                           f"within {timeout:.3f}s (stream: "
                                           f"{'open' if self._watching else self.watch_error})")
                    limit = max(0.0, next_poll - now)
                    if deadline is not None:
                        limit = min(limit, deadline - now)
                    if now < warm_until:
                        limit = min(limit, _WARM_WAIT_S)
                    want_turn = reader is not None and turn is None
                    if limit > 0 and not want_turn and not (turn is not None and turn.active):
                        self._cond.wait(limit)
                        continue
                # Outside the lock: the thread that reads the job socket files into the table.
                if want_turn:
                    # Asked for after the first look at the table: a job done already costs
                    # no hand-over.
                    left = _READER_HANDOVER_S if deadline is None else deadline - time.monotonic()
                    turn = reader(max(0.0, min(_READER_HANDOVER_S, left)))
                    continue
                if limit > 0:
                    read_turn(turn, limit, spin_at, spin_end)
                    continue
                self._poll_quietly(missing)  # Outside the lock: the reader thread keeps filing.
                if self._watching:
                    next_poll = time.monotonic() + self.poll_interval
                else:
                    backoff = min(backoff * 2, _MAX_POLL_BACKOFF_S)
                    next_poll = time.monotonic() + backoff
        finally:
            if turn is not None:
                turn.end()


class SessionJobs(SessionPart):
    """The completions of a kvstrata.Session's GPU jobs (its CompletionTracker), given the
    session's kvstrata.connection.Connection (`conn`)."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self._tracker: Optional[CompletionTracker] = None
        self._tracker_lock = threading.Lock()
        # Where a waiting thread may read its jobs' completions itself (see
        # CompletionTracker.wait); kvstrata.gpu_io sets it to its job socket's.
        self.reader: Callable[[], Optional[Callable[[float], Any]]] = lambda: None

    def close(self) -> None:
        with self._tracker_lock:
            tracker, self._tracker = self._tracker, None
        if tracker is not None:
            tracker.close()

    @property
    def tracker(self) -> Optional[CompletionTracker]:
        """The CompletionTracker if completions() made one already (no stream is opened)."""
        return self._tracker

    def completions(self) -> CompletionTracker:
        """The session's CompletionTracker; its WatchCompletions stream opens on first use."""
        conn = self._conn
        with self._tracker_lock:
            if self._tracker is None:
                sid, tag = conn.session_tag()
                self._tracker = CompletionTracker(
                    conn.client, sid, on_lost=self._on_tracker_lost if conn.auto_reconnect else None,
                    tag=tag)
            tracker = self._tracker
        if conn.connected or not conn.auto_reconnect:
            tracker.start()
        return tracker

    def _on_tracker_lost(self, err: BaseException, session_id: int) -> None:
        if isinstance(err, KVStrataError) and (err.code == grpc.StatusCode.UNAVAILABLE
                                               or session_unknown(err, session_id)):
            self._conn.note_lost(err, session_id)

    def poll_completions(self, max_completions: int = 0) -> List[Any]:
        """Every job completion not yet handed out: one PollCompletions RPC plus what the
        completion stream delivered (kvstrata.pb.JobCompletion messages).

        While reconnecting after a daemon restart: no RPC, the completions at hand (among
        them the failures of the lost session's jobs)."""
        tracker = self.completions()
        auto = self._conn.auto_reconnect
        if auto and not self._conn.connected:
            return list(tracker.take().values())
        try:
            return tracker.poll(max_completions)
        except KVStrataError as err:
            if not auto or err.code not in (grpc.StatusCode.UNAVAILABLE,
                                            grpc.StatusCode.NOT_FOUND):
                raise
            self._on_tracker_lost(err, tracker.session_id)
            if self._conn.connected:
                raise
            return list(tracker.take().values())

    def take_completions(self) -> Dict[int, Any]:
        """Completions the stream delivered so far, by job id; no RPC, never blocks."""
        return self.completions().take()

    def wait_jobs(self, job_ids: Sequence[int], timeout: Optional[float] = None) -> Dict[int, Any]:
        """Block until the jobs completed; their JobCompletions by job id (taken).

        TimeoutError when timeout seconds pass first. Check `.ok` / `.failed_blocks`.
        """
        return self.completions().wait(job_ids, timeout, reader=self.reader())

    def wait_job(self, job_id: int, timeout: Optional[float] = None) -> Any:
        """wait_jobs for one job: its JobCompletion."""
        return self.wait_jobs([job_id], timeout)[int(job_id)]

    def expect(self, daemon_job_id: int, tag: int, kind: int, num_blocks: int) -> int:
        """The job id handed to the caller (tagged with the generation) and tracked as pending."""
        job_id = daemon_job_id | tag
        self.completions().expect(job_id, kind, num_blocks, tag)
        return job_id

    def jobs_lost(self, reason: str) -> None:
        with self._tracker_lock:
            tracker = self._tracker
        if tracker is not None:
            n = tracker.fail_pending(reason)
            if n:
                log.info("kvstrata: %d pending jobs reported failed: %s", n, reason)

    def resumed(self, session_id: int, tag: int) -> None:
        """The same session again: reopen the completion stream if it ended."""
        with self._tracker_lock:
            tracker = self._tracker
        if tracker is not None and not tracker.watching:
            tracker.rebind(session_id, tag, fail=False)

    def switched(self, session_id: int, tag: int) -> None:
        """Move the tracker to a new session (its old jobs reported failed)."""
        with self._tracker_lock:
            tracker = self._tracker
        if tracker is not None:
            tracker.rebind(session_id, tag)
