"""Several engine processes on one GPU, and an engine killed mid-transfer.

Engines are separate Python processes (multiprocessing "spawn"), each with its own KV cache
allocation, session and registration; the daemon is a third process.
"""
from __future__ import annotations

import multiprocessing
import random

import pytest

from gpu_support import (Daemon, KvCache, l1_used_bytes, llama_spec, managed_daemon,
                         require_gpu, roundtrip_rounds, wait_until)

require_gpu()

import kvstrata  # noqa: E402

import gpu_engine  # noqa: E402

CHILD_TIMEOUT_S = 180.0


def _recv(conn, proc, timeout: float, what: str):
    if not conn.poll(timeout):
        raise AssertionError(f"{what}: no message within {timeout}s (exit code {proc.exitcode})")
    msg = conn.recv()
    assert msg.get("kind") != "error", f"{what} failed in the engine process:\n{msg['error']}"
    return msg


def _spawn(target, cfg):
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=target, args=(cfg, child), daemon=True)
    proc.start()
    child.close()
    return proc, parent


def test_two_engine_processes_share_a_namespace(gpu_daemon, client, salt):
    """Two engines at once on one GPU: own caches, sessions and registrations; round trips
    in parallel, then each loads the blocks the other stored (digests must match)."""
    procs = []
    try:
        for name in ("a", "b"):
            cfg = dict(endpoint=gpu_daemon.endpoint, name=name, seed=f"{salt}-{name}", salt=salt,
                       num_blocks=768, rounds=12)
            procs.append(_spawn(gpu_engine.roundtrip_engine, cfg))
        published = [_recv(conn, p, CHILD_TIMEOUT_S, f"engine {i}") for i, (p, conn) in enumerate(procs)]
        assert published[0]["session_id"] != published[1]["session_id"]
        assert published[0]["pid"] != published[1]["pid"]
        procs[0][1].send(published[1])
        procs[1][1].send(published[0])
        for i, (p, conn) in enumerate(procs):
            done = _recv(conn, p, CHILD_TIMEOUT_S, f"engine {i}")
            assert done["kind"] == "done" and done["counters"]["loaded_blocks"] > 0, done
        for p, _ in procs:
            p.join(30)
            assert p.exitcode == 0, f"engine exited with {p.exitcode}"
    finally:
        for p, conn in procs:
            if p.is_alive():
                p.kill()
                p.join(10)
            conn.close()


@pytest.fixture
def fresh_daemon():
    """A daemon of its own (baseline L1 usage 0), with a 4 GiB L1."""
    yield from managed_daemon({"l1.capacity": "4GiB"})


@pytest.mark.parametrize("event_pending", [False, True], ids=["copying", "waiting-on-event"])
def test_engine_killed_mid_transfer(fresh_daemon: Daemon, salt, event_pending):
    """An engine SIGKILLed right after submitting 2 GiB of stores: the daemon keeps serving,
    ends the session at the heartbeat deadline, releases its resources (after clearing the
    namespace L1 is back to its baseline), and a new engine registers and round-trips.
    "waiting-on-event": the stores wait on an IPC event behind ~1 s of GPU work when the
    engine dies."""
    d = fresh_daemon
    with kvstrata.Client(d.endpoint, timeout=30.0) as c:
        assert c.get_status().cuda_enabled, d.log_tail()
        baseline = l1_used_bytes(c)
        cfg = dict(endpoint=d.endpoint, seed=salt, salt=salt, num_blocks=1024, heartbeat_ms=1000,
                   event_pending=event_pending)
        proc, conn = _spawn(gpu_engine.killed_engine, cfg)
        try:
            msg = _recv(conn, proc, CHILD_TIMEOUT_S, "killed engine")
            proc.join(60)
            assert proc.exitcode == -9, f"engine exit code {proc.exitcode}"
        finally:
            if proc.is_alive():
                proc.kill()
                proc.join(10)
            conn.close()

        # The daemon stays healthy.
        assert d.running(), d.log_tail()
        assert c.is_serving()
        assert c.get_status().version
        # The session ends at its heartbeat deadline and its jobs / registration go away.
        gone = wait_until(lambda: msg["session_id"] not in
                          {s.session_id for s in c.list_sessions().sessions}, 30.0, 0.1)
        assert gone, f"session {msg['session_id']} still listed 30 s after the kill:\n{d.log_tail()}"
        for _ in c.clear(fingerprint=msg["fingerprint"]):
            pass
        back = wait_until(lambda: l1_used_bytes(c) == baseline, 15.0, 0.1)
        assert back, (f"L1 used bytes {l1_used_bytes(c)} != baseline {baseline} after the "
                      f"killed session ended and its namespace was cleared:\n{d.log_tail()}")

        # A new engine registers and round-trips.
        with kvstrata.Session(c, client_name="after-kill") as s:
            ns = s.register_namespace(**llama_spec("nhd", salt + "-after"))
            cache = KvCache("nhd", 256)
            reg = s.register_cuda_kv_caches(ns, cache.pieces())
            counters = roundtrip_rounds(s, ns, reg, cache, random.Random(salt), 4, max_blocks=32)
            assert counters["loaded_blocks"] > 0
        assert d.running() and c.is_serving(), d.log_tail()
