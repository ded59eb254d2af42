"""Submits over job frames return once the frame is written (issue 14: the submit call costs
the engine next to nothing). The daemon's answer is read by the session's job-socket reader:
a refusal becomes the job's failed completion (not an exception from submit), an accepted
job's completion goes to the client's id even when it arrives before the answer, and a
connection that breaks first fails every unanswered job. Real kvstratad processes on real
Unix sockets; without a GPU every job the daemon sees is refused at its registration check,
and a small socket server of the test stands in for a daemon that answers late."""
from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import struct
import threading
import time
from pathlib import Path
from typing import Iterator, List

import grpc
import pytest

import kvstrata
from kvstrata import pb
from kvstrata.job_ids import CLIENT_JOB_BIT
from kvstrata.job_socket import Reading
from kvs_testing import Daemon, mha_spec, short_tmpdir, wait_until

REQUEST = struct.Struct("<IHHQIIIIQQ")   # a job frame's header (docs/wire-protocol.md)
ANSWER = struct.Struct("<IIQI")
COMPLETION = struct.Struct("<IHHQQQII")  # a completion frame's header
MAGIC = 0x4A53564B
COMPLETION_MAGIC = 0x4353564B
UNKNOWN_REG = 7  # no GPU here: the daemon knows no CUDA registration


@pytest.fixture
def ns(session: kvstrata.Session) -> kvstrata.RegisteredNamespace:
    return session.register_namespace(**mha_spec(model="kvstrata-test/async-jobs"))


def keys(n: int, size: int = 32) -> List[bytes]:
    return [os.urandom(size) for _ in range(n)]


def assert_refused(c, n: int, words: str) -> None:
    assert not c.ok and list(c.failed_blocks) == list(range(n)), c
    assert words in c.error, c.error


def test_a_refused_submit_is_a_failed_completion(session, ns, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="kvstrata")
    job = session.submit_load(ns, UNKNOWN_REG, keys(16), range(16))  # No exception.
    assert job & CLIENT_JOB_BIT
    c = session.wait_job(job, timeout=10)
    assert c.job_id == job and c.kind == pb.JobCompletion.KIND_LOAD
    assert_refused(c, 16, "NOT_FOUND")
    assert f"registration {UNKNOWN_REG}" in c.error, c.error
    def refusals():
        return [r for r in caplog.records if str(job) in r.getMessage()]
    assert wait_until(lambda: refusals(), 5.0)  # Logged by the reader right after filing.
    time.sleep(0.1)
    assert len(refusals()) == 1 and "refused" in refusals()[0].getMessage()
    assert session.take_completions() == {}  # Handed out once.
    assert session.connected  # A refused job is not a lost session.


def test_each_of_many_submits_gets_its_own_completion(session, ns) -> None:
    jobs = {}
    for i in range(64):
        n = 1 + i % 7
        submit = session.submit_store if i % 2 else session.submit_load
        jobs[submit(ns, UNKNOWN_REG, keys(n), range(n))] = (n, i % 2)
    assert len(jobs) == 64  # Distinct ids.
    got = {}
    deadline = time.monotonic() + 10
    while len(got) < len(jobs) and time.monotonic() < deadline:
        got.update(session.take_completions())
        time.sleep(0.01)
    assert set(got) == set(jobs)
    for job, (n, store) in jobs.items():
        c = got[job]
        assert c.job_id == job
        assert c.kind == (pb.JobCompletion.KIND_STORE if store else pb.JobCompletion.KIND_LOAD)
        assert_refused(c, n, "registration")


def test_bad_block_ids_for_the_daemon_are_a_failed_completion(session, ns) -> None:
    """INVALID_ARGUMENT from the daemon (a load writing one block twice) arrives the same way;
    what the client checks itself still raises at once."""
    job = session.submit_load(ns, UNKNOWN_REG, keys(2), [3, 3])
    assert_refused(session.wait_job(job, timeout=10), 2, "")
    with pytest.raises(ValueError):
        session.submit_load(ns, UNKNOWN_REG, keys(2), [0, -1])
    with pytest.raises(TypeError):
        session.submit_store(ns, UNKNOWN_REG, ["a", "b"], [0, 1])
    with pytest.raises(ValueError):
        session.submit_store(ns, UNKNOWN_REG, keys(2), [0, 1], event=-1)
    with pytest.raises(TypeError, match=r"block_ids\[1\] must be an int, got float"):
        session.submit_load(ns, UNKNOWN_REG, keys(2), [0, 1.0])
    with pytest.raises(ValueError, match=r"block_ids\[0\] = 4294967296 is out of range"):
        session.submit_load(ns, UNKNOWN_REG, keys(2), [1 << 32, 0])
    with pytest.raises(TypeError, match=r"keys\[1\] must be bytes, got int"):
        session.submit_load(ns, UNKNOWN_REG, [b"a" * 32, 7], [0, 1])


def test_the_grpc_path_still_raises(session, ns) -> None:
    session.fast_path = False
    try:
        with pytest.raises(kvstrata.KVStrataError) as exc:
            session.submit_load(ns, UNKNOWN_REG, keys(4), range(4))
        assert exc.value.code == grpc.StatusCode.NOT_FOUND
    finally:
        session.fast_path = True
    with pytest.raises(kvstrata.KVStrataError):  # Keys of several lengths: gRPC too.
        session.submit_store(ns, UNKNOWN_REG, [b"a" * 16, b"b" * 20], [0, 1])
    with pytest.raises(kvstrata.KVStrataError):  # ... even when they add up to 3 x 20 bytes.
        session.submit_store(ns, UNKNOWN_REG, [b"a" * 16, b"b" * 20, b"c" * 24], [0, 1, 2])


def test_cancel_of_a_refused_job_is_false(session, ns) -> None:
    job = session.submit_store(ns, UNKNOWN_REG, keys(2), [0, 1])
    assert session.cancel_job(job) is False
    assert_refused(session.wait_job(job, timeout=10), 2, "registration")


# ---------------------------------------------------------------------- the daemon goes away


def test_a_connection_that_breaks_fails_the_unanswered_jobs(daemon_factory) -> None:
    """The daemon stopped (SIGSTOP) with frames unread, then killed: every job whose answer
    was not read fails as a completion; on a restarted daemon the next submit connects again."""
    d = daemon_factory()
    s = kvstrata.Session(endpoint=d.endpoint, reconnect_backoff=(0.05, 0.2))
    try:
        ns = s.register_namespace(**mha_spec(model="kvstrata-test/async-kill"))
        warm = s.submit_load(ns, UNKNOWN_REG, keys(2), [0, 1])  # Opens the job connection.
        assert_refused(s.wait_job(warm, timeout=10), 2, "registration")
        d.proc.send_signal(signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            jobs = [s.submit_load(ns, UNKNOWN_REG, keys(8), range(8)) for _ in range(5)]
            assert time.monotonic() - t0 < 1.0, "submits waited for a stopped daemon"
        finally:
            d.kill()  # SIGKILL works on a stopped process.
        done = s.wait_jobs(jobs, timeout=10)
        for job in jobs:
            assert_refused(done[job], 8, "")
            assert done[job].error, done[job]
        d2 = Daemon(d.workdir, socket=d.socket).start()
        try:
            assert wait_until(lambda: s.connected and s.generation == 1, 15.0), s.last_error
            again = s.submit_store(ns, UNKNOWN_REG, keys(3), range(3))
            assert_refused(s.wait_job(again, timeout=10), 3, "registration")
        finally:
            d2.stop()
    finally:
        s.close()


# ---------------------------------------------------------------------- a daemon that answers late


def completion_frame(session_id: int, job_id: int, failed=(), error: bytes = b"",
                     kind: int = 2, elapsed_us: int = 1500) -> bytes:
    """A completion frame as the daemon writes one (docs/wire-protocol.md)."""
    return (COMPLETION.pack(COMPLETION_MAGIC, kind, 0, session_id, job_id, elapsed_us,
                            len(failed), len(error))
            + struct.pack(f"<{len(failed)}I", *failed) + error)


class LateServer:
    """A socket server standing in for the daemon's fast-path socket: reads each job frame
    and answers it `delay_s` later with the next of `answers` ((status, job id, message),
    optionally with bytes to write before and after the answer: completion frames)."""

    def __init__(self, path: Path, delay_s: float, answers: List[tuple]) -> None:
        self.path, self.delay_s, self.answers = str(path), delay_s, list(answers)
        self.frames: List[tuple] = []
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(4)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        with conn:
            while self.answers:
                head = conn.recv(REQUEST.size, socket.MSG_WAITALL)
                if len(head) < REQUEST.size:
                    return
                h = REQUEST.unpack(head)
                count, key_bytes = h[5], h[6]
                conn.recv(count * (key_bytes + 4), socket.MSG_WAITALL)
                self.frames.append(h)
                time.sleep(self.delay_s)
                status, job, message, *around = self.answers.pop(0)
                before, after = around if around else (b"", b"")
                conn.sendall(before + ANSWER.pack(MAGIC, status, job, len(message)) + message
                             + after)

    def close(self) -> None:
        try:
            self.listener.shutdown(socket.SHUT_RDWR)  # Wakes an accept() still waiting.
        except OSError:
            pass
        self.listener.close()
        self.thread.join(timeout=5)


@pytest.fixture
def late(session: kvstrata.Session) -> Iterator:
    """Points the session's job frames at a LateServer (lookups are not used here)."""
    made: List[LateServer] = []
    tmp = short_tmpdir()

    def make(delay_s: float, answers: List[tuple]) -> LateServer:
        server = LateServer(tmp / "late.sock", delay_s, answers)
        session._conn._side_sockets[session.open_response.lookup_socket] = server.path
        made.append(server)
        return server

    yield make
    for server in made:
        server.close()
    shutil.rmtree(tmp, ignore_errors=True)


def test_submit_returns_without_waiting_for_the_answer(session, ns, late) -> None:
    server = late(1.0, [(0, 4242, b"")])
    t0 = time.perf_counter()
    job = session.submit_load(ns, UNKNOWN_REG, keys(512), range(512))
    took = time.perf_counter() - t0
    assert took < 0.2, f"submit took {took * 1e3:.1f} ms against a daemon answering after 1 s"
    # The completion comes (on the stream) before the answer naming its daemon id: held.
    tracker = session.completions()
    tracker._add([pb.JobCompletion(job_id=4242, kind=pb.JobCompletion.KIND_LOAD, ok=True)])
    assert session.take_completions() == {}
    c = session.wait_job(job, timeout=5)
    assert time.perf_counter() - t0 >= 0.9  # Only once the answer came.
    assert c.ok and c.job_id == job
    assert len(server.frames) == 1 and server.frames[0][5] == 512 and server.frames[0][9] == 0


def test_a_late_refusal_is_a_failed_completion(session, ns, late) -> None:
    late(0.3, [(grpc.StatusCode.RESOURCE_EXHAUSTED.value[0], 0, b"the pool is full"),
               (0, 77, b"")])
    t0 = time.perf_counter()
    refused = session.submit_store(ns, UNKNOWN_REG, keys(4), range(4))
    accepted = session.submit_store(ns, UNKNOWN_REG, keys(2), range(2))
    assert time.perf_counter() - t0 < 0.2
    c = session.wait_job(refused, timeout=5)
    assert_refused(c, 4, "RESOURCE_EXHAUSTED: the pool is full")
    # The second frame's answer maps daemon job 77 to the second id, in order.
    session.completions()._add([pb.JobCompletion(job_id=77, kind=pb.JobCompletion.KIND_STORE,
                                                 ok=True)])
    assert session.wait_job(accepted, timeout=5).ok
    assert session.connected


def test_a_completion_of_a_grpc_job_is_not_kept_back(session, ns, late) -> None:
    """Completions held while a frame is unanswered that no answer claims (a job submitted
    through gRPC, id = the daemon's) are filed once every frame is answered."""
    late(0.3, [(0, 9001, b"")])
    job = session.submit_load(ns, UNKNOWN_REG, keys(1), [0])
    tracker = session.completions()
    tracker._add([pb.JobCompletion(job_id=55, ok=True)])  # Some gRPC job's completion.
    assert session.wait_job(55, timeout=5).ok
    assert not session.completions().done(job)
    tracker._add([pb.JobCompletion(job_id=9001, ok=True)])
    assert session.wait_job(job, timeout=5).ok


def test_answers_from_a_server_that_closes_fail_the_rest(session, ns, late) -> None:
    late(0.1, [(0, 5, b"")])  # Answers one frame, then closes the connection.
    jobs = [session.submit_load(ns, UNKNOWN_REG, keys(3), range(3)) for _ in range(3)]
    first, *rest = jobs
    for job in rest:
        c = session.wait_job(job, timeout=5)
        assert_refused(c, 3, "connection")
    session.completions()._add([pb.JobCompletion(job_id=5, ok=True)])
    assert session.wait_job(first, timeout=5).ok


def test_completions_on_the_job_socket_are_filed_before_or_after_the_answer(session, ns,
                                                                            late) -> None:
    """The daemon offers socket_completions: job frames go as version 2, and a completion
    frame on the connection is filed for its job, whether it comes before the answer naming
    the job's daemon id or after it."""
    assert session.open_response.socket_completions
    sid = session.open_response.session_id
    server = late(0.05, [(0, 31, b"", completion_frame(sid, 31, [1], b"copy failed"), b""),
                         (0, 32, b"", b"", completion_frame(sid, 32, kind=1))])
    first = session.submit_load(ns, UNKNOWN_REG, keys(2), range(2))
    second = session.submit_store(ns, UNKNOWN_REG, keys(3), range(3))
    c = session.wait_job(first, timeout=5)
    assert c.job_id == first and not c.ok and list(c.failed_blocks) == [1]
    assert c.error == "copy failed" and c.elapsed_us == 1500
    assert c.kind == pb.JobCompletion.KIND_LOAD
    c = session.wait_job(second, timeout=5)
    assert c.ok and c.kind == pb.JobCompletion.KIND_STORE and c.job_id == second
    assert [f[1] for f in server.frames] == [2, 2]  # Both frames asked for socket completions.
    assert session.take_completions() == {}


def test_a_completion_of_another_session_is_not_filed(session, ns, late) -> None:
    sid = session.open_response.session_id
    late(0.05, [(0, 41, b"", b"", completion_frame(sid + 1000, 41))])
    job = session.submit_load(ns, UNKNOWN_REG, keys(1), [0])
    assert session.completions().daemon_job_id(job, timeout=5) == 41
    time.sleep(0.1)
    assert not session.completions().done(job)  # An earlier daemon's session: dropped.
    session.completions()._add([pb.JobCompletion(job_id=41, ok=True)])  # The stream's.
    assert session.wait_job(job, timeout=5).ok


def test_an_untrustworthy_completion_frame_breaks_the_connection(session, ns, late) -> None:
    """A completion frame naming more failed blocks than a job can have is not read on: the
    connection is dropped and the unanswered job fails (never a wrong completion)."""
    sid = session.open_response.session_id
    bad = COMPLETION.pack(COMPLETION_MAGIC, 2, 0, sid, 51, 0, 1 << 20, 0)
    late(0.05, [(0, 51, b"", bad, b"")])
    job = session.submit_load(ns, UNKNOWN_REG, keys(2), range(2))
    assert_refused(session.wait_job(job, timeout=5), 2, "failed blocks")


# ---------------------------------------------------------------------- the waiting thread reads


def readers(session: kvstrata.Session) -> List[int]:
    """Records the thread that files each completion frame (bind before the first submit:
    the job socket binds the callback when it is made)."""
    seen: List[int] = []
    filed = session._gpu._on_job_completion

    def noted(c) -> None:
        seen.append(threading.get_ident())
        filed(c)
    session._gpu._on_job_completion = noted
    return seen


def test_a_waiting_thread_reads_its_completion_itself(session, ns, late) -> None:
    """wait_job takes the job socket's reader role (one thread's wake-up less per
    completion); once it returns, the reader thread reads on."""
    sid = session.open_response.session_id
    seen = readers(session)
    late(0.2, [(0, 61, b"", b"", completion_frame(sid, 61)),
               (0, 62, b"", b"", completion_frame(sid, 62))])
    job = session.submit_load(ns, UNKNOWN_REG, keys(4), range(4))
    assert session.wait_job(job, timeout=5).ok
    assert seen == [threading.get_ident()]
    later = session.submit_load(ns, UNKNOWN_REG, keys(4), range(4))
    assert wait_until(lambda: session.completions().done(later), 5)
    assert len(seen) == 2 and seen[1] != threading.get_ident()  # The reader thread's.
    assert session.wait_job(later, timeout=5).ok


def test_threads_waiting_at_once_each_get_their_completion(session, ns, late) -> None:
    """One waiting thread reads; the others wait on the table as before."""
    sid = session.open_response.session_id
    late(0.05, [(0, 70 + i, b"", b"", completion_frame(sid, 70 + i)) for i in range(6)])
    jobs = [session.submit_load(ns, UNKNOWN_REG, keys(2), range(2)) for _ in range(6)]
    got: List = [None] * len(jobs)

    def wait(i: int) -> None:
        got[i] = session.wait_job(jobs[i], timeout=5)
    threads = [threading.Thread(target=wait, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert all(c is not None and c.ok and c.job_id == job for c, job in zip(got, jobs)), got




def test_a_waiting_thread_polls_without_sleeping_once_its_job_is_due(session, ns, late,
                                                                      monkeypatch) -> None:
    """Without a pace the wait sleeps in poll(); with one (set here to 45 ms for the 4-block
    loads the server answers after 50 ms: the first job's own time, connection set-up
    included, could be later than the second's), the waiting thread sleeps until about 1 ms
    before the job is due, then polls without sleeping (kvstrata.job_pace)."""
    sid = session.open_response.session_id
    late(0.05, [(0, 81 + i, b"", b"", completion_frame(sid, 81 + i)) for i in range(3)])
    calls: List[float] = []  # time.monotonic() of each Reading.spin_for
    spin_for = Reading.spin_for

    def noted(self, seconds: float) -> None:
        calls.append(time.monotonic())
        spin_for(self, seconds)
    monkeypatch.setattr(Reading, "spin_for", noted)
    first = session.submit_load(ns, UNKNOWN_REG, keys(4), range(4))
    assert session.wait_job(first, timeout=5).ok
    assert calls == []  # No pace yet: nothing was due.
    session.completions()._pace.learn(pb.JobCompletion.KIND_LOAD, 4, 0.045)
    t0 = time.monotonic()
    second = session.submit_load(ns, UNKNOWN_REG, keys(4), range(4))
    assert session.wait_job(second, timeout=5).ok
    assert calls and calls[0] - t0 > 0.04, [c - t0 for c in calls]
    session.completions().spin_s = 0  # Off: the wait sleeps in poll() throughout.
    del calls[:]
    third = session.submit_load(ns, UNKNOWN_REG, keys(4), range(4))
    assert session.wait_job(third, timeout=5).ok
    assert calls == []
