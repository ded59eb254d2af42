"""Daemon restarts: a Session (auto_reconnect=True, the default) opens a new session on the
restarted daemon, re-registers its namespaces and maps the new shared region, while calls in
between raise DaemonUnavailable at once. Real kvstratad processes on real sockets."""
from __future__ import annotations

import os
import threading
import time
from typing import Iterator, List

import grpc
import numpy as np
import pytest

import kvstrata
from kvs_testing import DTYPE_BYTES, Daemon, mha_spec, wait_until

HEARTBEAT_MS = 1500
RECONNECT_WITHIN_S = 10.0
PROMPT_S = 1.0


@pytest.fixture
def thread_errors(monkeypatch: pytest.MonkeyPatch) -> List[BaseException]:
    """Exceptions that escaped any thread during the test."""
    errors: List[BaseException] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: errors.append(args.exc_value))
    return errors


@pytest.fixture
def restarts() -> Iterator[List[Daemon]]:
    """Daemons started again on an earlier daemon's socket; killed after the test."""
    started: List[Daemon] = []
    yield started
    for d in started:
        if d.running():
            d.stop()
        d.kill()


def restart(old: Daemon, restarts: List[Daemon]) -> Daemon:
    """A new kvstratad on the socket (and in the directory) of `old`, which must be down."""
    assert not old.running()
    new = Daemon(old.workdir, {"sessions.heartbeat_timeout_ms": str(HEARTBEAT_MS)},
                 socket=old.socket)
    restarts.append(new)
    return new.start()


def block_bytes(spec: dict) -> int:
    return (2 * spec["num_layers"] * spec["num_kv_heads"] * spec["head_size"]
            * spec["tokens_per_block"] * DTYPE_BYTES[spec["dtype"]])


def blocks_for(n: int, nbytes: int, seed: int) -> List[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, nbytes, dtype=np.uint8) for _ in range(n)]


def keys_for(tag: str, n: int) -> List[bytes]:
    return [f"{tag}-{os.getpid()}-{i}".encode().ljust(32, b".") for i in range(n)]


def round_trip(s: kvstrata.Session, ns: kvstrata.RegisteredNamespace, tag: str, n: int = 8) -> None:
    """Store n random blocks and load them back byte-exact through the shared region."""
    keys = keys_for(tag, n)
    blocks = blocks_for(n, ns.bytes_per_block, hash(tag) & 0xFFFF)
    stored = s.store(ns, keys, blocks)
    assert stored.stored + stored.already_present == n, stored
    hit = s.lookup(ns, keys, lease=True)
    assert hit.hit_blocks == n
    got = s.load(ns, keys, lease_id=hit.lease_id)
    assert list(got) == [True] * n
    for i, (a, b) in enumerate(zip(got.blocks, blocks)):
        assert np.array_equal(np.asarray(a), b), f"block {i} differs after the round trip"


def assert_prompt_unavailable(fn, what: str) -> None:
    t0 = time.monotonic()
    with pytest.raises(kvstrata.DaemonUnavailable) as exc:
        fn()
    elapsed = time.monotonic() - t0
    assert exc.value.code == grpc.StatusCode.UNAVAILABLE
    assert elapsed < PROMPT_S, f"{what} took {elapsed:.3f}s to raise DaemonUnavailable"


def assert_registered_on(d: Daemon, s: kvstrata.Session, ns: kvstrata.RegisteredNamespace) -> None:
    """The namespace handle is valid for daemon d, registered by the session's new session."""
    with d.client(timeout=5.0) as c:
        listed = {n.fingerprint: n for n in c.list_namespaces().namespaces}
        assert ns.fingerprint in listed, f"{ns} not registered on the new daemon"
        info = listed[ns.fingerprint]
        assert info.namespace_id == ns.namespace_id
        assert info.bytes_per_block == ns.bytes_per_block
        assert info.sessions == 1, "registered by exactly one session (the reconnected one)"
        sessions = {x.session_id for x in c.list_sessions().sessions}
        assert s.session_id in sessions, "the reconnected session is not listed"
        assert c.get_status().instance_id == s.daemon_instance_id


def test_sigkill_restart_reconnects_and_reregisters(daemon_factory, restarts, thread_errors,
                                                    caplog) -> None:
    d = daemon_factory({"sessions.heartbeat_timeout_ms": str(HEARTBEAT_MS)})
    reconnected: List[int] = []
    spec = mha_spec(salt=f"reconnect-kill-{os.getpid()}")
    with kvstrata.Session(endpoint=d.endpoint, client_name="reconnect", timeout=5.0,
                          on_reconnect=lambda s: reconnected.append(s.generation)) as s:
        ns = s.register_namespace(**spec)
        assert ns.bytes_per_block == block_bytes(spec)
        round_trip(s, ns, "before")
        old_sid, old_instance, fingerprint = s.session_id, s.daemon_instance_id, ns.fingerprint
        assert s.connected and s.generation == 0

        d.kill()  # SIGKILL: no goodbye, stale socket file left behind.
        keys = keys_for("before", 8)
        assert_prompt_unavailable(lambda: s.lookup(ns, keys), "lookup after SIGKILL")
        assert not s.connected and not s.alive
        assert_prompt_unavailable(lambda: s.lookup(ns, keys), "lookup while disconnected")
        assert_prompt_unavailable(
            lambda: s.store(ns, keys, blocks_for(8, ns.bytes_per_block, 1)), "store")
        assert_prompt_unavailable(lambda: s.load(ns, keys), "load")
        assert_prompt_unavailable(lambda: s.register_namespace(**spec), "register_namespace")
        time.sleep(0.5)  # Down for a while: a few reconnect attempts fail.
        assert not s.connected and s.reconnect_attempts >= 1

        d2 = restart(d, restarts)
        assert wait_until(lambda: s.connected, RECONNECT_WITHIN_S), (
            f"not reconnected within {RECONNECT_WITHIN_S}s: {s.last_error}\n{d2.log_tail()}")
        assert s.generation == 1 and reconnected == [1]
        assert s.alive
        assert s.session_id != old_sid
        assert s.daemon_instance_id != old_instance
        assert ns.fingerprint == fingerprint  # Same spec, same fingerprint.
        assert_registered_on(d2, s, ns)

        # The old daemon's blocks are gone (L1 only); new ones round-trip through the new region.
        assert s.lookup(ns, keys).hit_blocks == 0
        region = s.shared_region()
        assert region.session_id == s.session_id
        round_trip(s, ns, "after")
        # A namespace registered after the reconnect works too.
        ns2 = s.register_namespace(**mha_spec(salt=f"reconnect-kill-2-{os.getpid()}"))
        round_trip(s, ns2, "after-2")
    assert s.closed
    with d2.client(timeout=5.0) as c:
        assert s.session_id not in {x.session_id for x in c.list_sessions().sessions}
    lost = [r for r in caplog.records if "reconnecting to" in r.getMessage()]
    assert len(lost) == 1, "exactly one log record per disconnect"
    assert not thread_errors


def test_graceful_restart_noticed_by_heartbeats(daemon_factory, restarts, thread_errors) -> None:
    """SIGTERM and restart without any call in between: the heartbeat thread notices."""
    d = daemon_factory({"sessions.heartbeat_timeout_ms": str(HEARTBEAT_MS)})
    with kvstrata.Session(endpoint=d.endpoint, client_name="reconnect-term", timeout=5.0) as s:
        assert s.heartbeat_timeout_ms == HEARTBEAT_MS
        ns = s.register_namespace(**mha_spec(salt=f"reconnect-term-{os.getpid()}"))
        round_trip(s, ns, "term-before")
        assert d.stop() == 0, d.log_tail()
        assert wait_until(lambda: not s.connected, HEARTBEAT_MS / 1000 + 2), \
            "the heartbeat thread did not notice the stopped daemon"
        assert_prompt_unavailable(lambda: s.heartbeat(), "heartbeat while disconnected")
        d2 = restart(d, restarts)
        assert wait_until(lambda: s.connected, RECONNECT_WITHIN_S), str(s.last_error)
        assert s.generation == 1
        assert_registered_on(d2, s, ns)
        round_trip(s, ns, "term-after")

        # And once more: generation counts every reconnect.
        assert d2.stop() == 0, d2.log_tail()
        d3 = restart(d2, restarts)
        assert wait_until(lambda: s.connected and s.generation == 2, RECONNECT_WITHIN_S), \
            str(s.last_error)
        assert_registered_on(d3, s, ns)
        round_trip(s, ns, "term-after-2")
    assert not thread_errors


def test_session_dropped_by_the_daemon_is_reopened(daemon_factory, thread_errors) -> None:
    """NOT_FOUND for the session (here: closed behind its back) also reconnects."""
    d = daemon_factory({"sessions.heartbeat_timeout_ms": str(HEARTBEAT_MS)})
    with d.client(timeout=5.0) as c, kvstrata.Session(c, client_name="dropped") as s:
        ns = s.register_namespace(**mha_spec(salt=f"reconnect-drop-{os.getpid()}"))
        old_sid = s.session_id
        c.close_session(session_id=old_sid)
        with pytest.raises(kvstrata.DaemonUnavailable):
            s.lookup(ns, keys_for("x", 1))  # NOT_FOUND for the session -> DaemonUnavailable
        assert wait_until(lambda: s.connected, RECONNECT_WITHIN_S), str(s.last_error)
        assert s.generation == 1 and s.session_id != old_sid
        assert_registered_on(d, s, ns)
        round_trip(s, ns, "dropped")
    assert not thread_errors


def test_daemon_stays_down(daemon_factory, thread_errors) -> None:
    """Retries back off (no busy loop), calls keep failing fast, close() returns promptly."""
    d = daemon_factory({"sessions.heartbeat_timeout_ms": str(HEARTBEAT_MS)})
    s = kvstrata.Session(endpoint=d.endpoint, client_name="down", timeout=5.0)
    try:
        ns = s.register_namespace(**mha_spec(salt=f"reconnect-down-{os.getpid()}"))
        d.kill()
        assert_prompt_unavailable(lambda: s.lookup(ns, keys_for("down", 1)), "first call")
        assert wait_until(lambda: s.reconnect_attempts >= 3, 5.0)
        before = s.reconnect_attempts
        time.sleep(2.0)
        during = s.reconnect_attempts - before
        # Back-off 50 ms doubling to 2 s: a handful per 2 s, never hundreds.
        assert 1 <= during <= 8, f"{during} reconnect attempts in 2 s"
        assert not s.connected and s.generation == 0
        assert isinstance(s.last_error, kvstrata.KVStrataError)
        assert_prompt_unavailable(lambda: s.lookup(ns, keys_for("down", 1)), "later call")
    finally:
        t0 = time.monotonic()
        s.close()
        elapsed = time.monotonic() - t0
    assert elapsed < 2.0, f"close() took {elapsed:.2f}s with the daemon down"
    assert s.closed and not s.alive
    assert not any(t.name.startswith("kvstrata-heartbeat") and t.is_alive()
                   for t in threading.enumerate() if t.name.endswith(str(s.session_id)))
    assert not thread_errors


def test_auto_reconnect_off_stays_lost(daemon_factory, restarts) -> None:
    d = daemon_factory({"sessions.heartbeat_timeout_ms": str(HEARTBEAT_MS)})
    with kvstrata.Session(endpoint=d.endpoint, client_name="no-reconnect", timeout=5.0,
                          auto_reconnect=False) as s:
        d.kill()
        restart(d, restarts)
        assert wait_until(lambda: not s.alive, 3 * HEARTBEAT_MS / 1000 + 3)
        time.sleep(HEARTBEAT_MS / 1000)
        assert not s.alive and s.generation == 0
        with pytest.raises(kvstrata.KVStrataError) as exc:
            s.heartbeat()
        assert exc.value.code == grpc.StatusCode.NOT_FOUND


def open_fds(pid: str) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_reconnects_close_the_connections_they_replace(daemon_factory, thread_errors) -> None:
    """Issue 46: every reconnect kept the old, still-connected channel open until
    Client.close(): 10 reconnects took the client from 2 to 12 sockets and the daemon from 15
    to 28 fds. Each reconnect here is a session the daemon dropped (closed behind the
    client's back), with store / lookup / load round trips (fast path, shared region) between."""
    d = daemon_factory({"sessions.heartbeat_timeout_ms": str(HEARTBEAT_MS)})
    daemon_pid = str(d.proc.pid)
    with d.client(timeout=5.0) as admin, kvstrata.Session(endpoint=d.endpoint, timeout=5.0,
                                                          client_name="leak") as s:
        ns = s.register_namespace(**mha_spec(salt=f"reconnect-leak-{os.getpid()}"))
        round_trip(s, ns, "leak-0")
        client_before, daemon_before = open_fds("self"), open_fds(daemon_pid)
        for i in range(1, 11):
            admin.close_session(session_id=s.session_id)
            with pytest.raises(kvstrata.DaemonUnavailable):
                s.lookup(ns, keys_for("x", 1))
            assert wait_until(lambda: s.connected and s.generation == i, RECONNECT_WITHIN_S), \
                str(s.last_error)
            round_trip(s, ns, f"leak-{i}")

        def settled() -> bool:  # a closed channel lets go of its socket in the background
            return (open_fds("self") <= client_before + 1
                    and open_fds(daemon_pid) <= daemon_before + 1)

        wait_until(settled, 5.0)
        client_after, daemon_after = open_fds("self"), open_fds(daemon_pid)
        print(f"10 reconnects: client fds {client_before} -> {client_after}, "
              f"daemon fds {daemon_before} -> {daemon_after}")
        assert client_after <= client_before + 1 and daemon_after <= daemon_before + 1, (
            f"after 10 reconnects: client fds {client_before} -> {client_after}, "
            f"daemon fds {daemon_before} -> {daemon_after}")
    assert not thread_errors
