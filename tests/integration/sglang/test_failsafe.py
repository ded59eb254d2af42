"""Fail-safe: with kvstratad absent, killed or hung every call answers "not found" / False
at once (never None, never an exception), and the backend works again when it is back."""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from kvs_testing import short_tmpdir, wait_until
from sglang_pools import alloc_pages, fill_pages, keys_for, make_config, make_pool, page_bytes

PROMPT_S = 1.0  # A call while the daemon is down answers well within this.


def all_calls_answer_not_found(b, pool, keys, idx) -> None:
    """Every HiCacheStorage call answers 'not found'/False promptly, never None."""
    calls = {
        "batch_exists": (lambda: b.batch_exists(keys), 0),
        "batch_set_v1": (lambda: b.batch_set_v1(keys, idx), [False] * len(keys)),
        "batch_get_v1": (lambda: b.batch_get_v1(keys, idx), [False] * len(keys)),
        "exists": (lambda: b.exists(keys[0]), False),
        "get": (lambda: b.get(keys[0]), None),
        "batch_get": (lambda: b.batch_get(keys[:1]), [None]),
        "set": (lambda: b.set(keys[0], pool.get_dummy_flat_data_page()), False),
        "batch_set": (lambda: b.batch_set(keys[:1], [pool.get_dummy_flat_data_page()]), False),
        "clear": (lambda: b.clear(), None),
    }
    for name, (call, expected) in calls.items():
        start = time.monotonic()
        got = call()
        took = time.monotonic() - start
        assert got == expected, f"{name} answered {got!r}, expected {expected!r}"
        assert took < PROMPT_S, f"{name} took {took:.2f}s with the daemon down"


def all_threads_stopped(pid: int) -> bool:
    tasks = Path(f"/proc/{pid}/task")
    states = [(t / "stat").read_text().rsplit(")", 1)[1].split()[0] for t in tasks.iterdir()]
    return bool(states) and all(s in "Tt" for s in states)


def round_trip(b, pool, prefix: str, seed: int) -> None:
    idx = alloc_pages(pool, 3)
    fill_pages(pool, idx, seed)
    keys = keys_for(prefix, 3)
    assert b.batch_set_v1(keys, idx) == [True] * 3
    assert b.batch_exists(keys) == 3
    dst = alloc_pages(pool, 3)
    assert b.batch_get_v1(keys, dst) == [True] * 3
    assert page_bytes(pool, dst) == page_bytes(pool, idx)


def test_daemon_absent_at_start_then_started(daemon_factory, backends):
    sock = short_tmpdir() / "kvstrata.sock"
    pool = make_pool("mha", "page_first")
    b = backends(make_config({"retry_interval_s": 0.1, "timeout_s": 1.0},
                             endpoint=str(sock)), pool)  # registers without a daemon
    assert b.namespace is None
    keys = keys_for("absent", 2)
    all_calls_answer_not_found(b, pool, keys, alloc_pages(pool, 2))
    assert b.counters["unavailable"] > 0

    daemon_factory(socket=sock)
    assert wait_until(lambda: b.namespace is not None, 10.0)
    round_trip(b, pool, "absent-then-started", 60)


def test_daemon_killed_then_restarted(daemon_factory, backends):
    d = daemon_factory({"sessions.heartbeat_timeout_ms": "1000"})
    pool = make_pool("mla", "page_first_direct")
    b = backends(make_config({"timeout_s": 1.0}, mla=True, endpoint=d.endpoint), pool)
    round_trip(b, pool, "before-kill", 61)
    fingerprint = b.namespace.fingerprint

    d.kill()  # SIGKILL: stale socket left behind.
    keys = keys_for("before-kill", 3)
    all_calls_answer_not_found(b, pool, keys, alloc_pages(pool, 3))
    time.sleep(0.3)
    all_calls_answer_not_found(b, pool, keys, alloc_pages(pool, 3))

    d2 = daemon_factory({"sessions.heartbeat_timeout_ms": "1000"}, socket=d.socket)
    assert wait_until(lambda: b.session.connected, 15.0), d2.log_tail()
    assert b.namespace.fingerprint == fingerprint
    assert b.batch_exists(keys) == 0  # L1 lived in the old daemon
    round_trip(b, pool, "after-restart", 62)


def test_hung_daemon_costs_at_most_the_timeout(daemon_factory, backends):
    d = daemon_factory()
    pool = make_pool("mha", "layer_first")
    b = backends(make_config({"timeout_s": 0.3}, endpoint=d.endpoint), pool)
    round_trip(b, pool, "before-stop", 63)
    keys = keys_for("before-stop", 3)
    os.kill(d.proc.pid, signal.SIGSTOP)
    assert wait_until(lambda: all_threads_stopped(d.proc.pid), 5.0)  # SIGSTOP is asynchronous
    try:
        start = time.monotonic()
        assert b.batch_exists(keys) == 0
        assert b.batch_get_v1(keys, alloc_pages(pool, 3)) == [False] * 3
        assert time.monotonic() - start < 3 * PROMPT_S
    finally:
        os.kill(d.proc.pid, signal.SIGCONT)
    assert wait_until(lambda: b.session.connected, 15.0)
    assert wait_until(lambda: b.batch_exists(keys) == 3, 10.0)
    round_trip(b, pool, "after-stop", 64)
