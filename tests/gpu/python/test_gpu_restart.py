"""Daemon restarts in GPU mode: the engine's session (auto_reconnect=True) re-registers its
CUDA KV caches on the restarted daemon from the kept description (same process, same CUDA
allocations, same IPC memory and event handles) and stores / loads byte-exact again; jobs in
flight when the daemon dies are reported failed (every block), never hang.

Known failure this guards against: "re-registration after a daemon restart failing with an
invalid context" (re-registration runs in the session's heartbeat thread, which has no CUDA
context: it must not need one).

The engine runs in a spawned process of its own (its CUDA context is not the pytest
process's), driven through a Pipe; the daemons are started and killed by the test.
"""
from __future__ import annotations

import multiprocessing
import os
import random
import traceback
from typing import Any, Dict, Optional

import pytest

from gpu_support import Daemon, require_gpu

require_gpu()

import kvstrata  # noqa: E402

NUM_BLOCKS = 64
CHILD_TIMEOUT_S = 180.0
RECONNECT_TIMEOUT_S = 60.0


# ---------------------------------------------------------------------- engine process


def restart_engine(cfg: Dict[str, Any], conn: Any) -> None:
    """Registers Llama KV caches, round-trips, then follows the parent's commands:
    "wait_reconnect" (after a restart), "roundtrip", "inflight" (submit big jobs and report
    their ids), "wait_failed" (wait for them: they must fail, all blocks), "close"."""
    try:
        import torch

        from gpu_support import (KvCache, assert_blocks_equal, check_completion, llama_spec,
                                 random_keys, roundtrip_rounds, wait_until)

        torch.cuda.set_device(0)
        rng = random.Random(cfg["seed"])
        reconnects = []
        s = kvstrata.Session(endpoint=cfg["endpoint"], client_name="gpu-restart", timeout=30.0,
                             heartbeat_timeout_ms=2000,
                             on_reconnect=lambda sess: reconnects.append(sess.generation))
        ns = s.register_namespace(**llama_spec("nhd", cfg["salt"]))
        cache = KvCache("nhd", NUM_BLOCKS)
        cache.poison(range(NUM_BLOCKS))
        reg = s.register_cuda_kv_caches(ns, cache.pieces(), layer_flags=True)
        ptrs = [t.data_ptr() for t in cache.layers]
        counters = roundtrip_rounds(s, ns, reg, cache, rng, 4, max_blocks=16)
        conn.send({"kind": "ready", "counters": counters, "session_id": s.session_id,
                   "registration_id": reg.registration_id, "namespace_id": ns.namespace_id,
                   "fingerprint": ns.fingerprint})
        jobs = []
        restarts = 0
        while True:
            cmd = conn.recv()
            if cmd == "wait_reconnect":
                # One command per daemon restart; the reconnect may already have happened
                # (e.g. while the parent waited for in-flight jobs to fail).
                restarts += 1
                ok = wait_until(lambda: s.connected and s.generation >= restarts
                                and len(reconnects) >= restarts, RECONNECT_TIMEOUT_S)
                assert ok, f"no reconnect within {RECONNECT_TIMEOUT_S}s: {s.last_error!r}"
                # The same handles, updated in place, and the same memory.
                assert s.cuda_registration(reg.registration_id) is reg
                assert not reg.unregistered
                assert [t.data_ptr() for t in cache.layers] == ptrs
                conn.send({"kind": "reconnected", "generation": s.generation,
                           "session_id": s.session_id, "registration_id": reg.registration_id,
                           "namespace_id": ns.namespace_id, "fingerprint": ns.fingerprint,
                           "last_error": repr(s.last_error)})
            elif cmd == "roundtrip":
                counters = roundtrip_rounds(s, ns, reg, cache, rng, 6, max_blocks=16)
                assert counters["loaded_blocks"] > 0, counters
                # Explicitly: store with an IPC event of the kept pool, load elsewhere, compare.
                ids = rng.sample(range(NUM_BLOCKS), 16)
                src, dst = ids[:8], ids[8:]
                keys = random_keys(rng, 8)
                cache.fill_random(src)
                snapshot = cache.blocks(src)
                check_completion(s.wait_job(s.submit_store(ns, reg, keys, src, event=True),
                                            timeout=60.0), "store after restart")
                cache.poison(dst)
                torch.cuda.current_stream().synchronize()
                check_completion(s.wait_job(s.submit_load(ns, reg, keys, dst), timeout=60.0),
                                 "load after restart")
                assert_blocks_equal(cache.blocks(dst), snapshot, "load after restart")
                # A layer-wise load (vLLM's same-step loads): the layer flags were
                # registered again with the rest.
                cache.poison(dst)
                torch.cuda.current_stream().synchronize()
                value = reg.layer_flags.next_value()
                job = s.submit_load(ns, reg, keys, dst, layer_flag_value=value)
                reg.layer_flags.wait_all(value)
                check_completion(s.wait_job(job, timeout=60.0), "layer-wise load after restart")
                torch.cuda.current_stream().synchronize()
                assert_blocks_equal(cache.blocks(dst), snapshot, "layer-wise load after restart")
                conn.send({"kind": "roundtrip", "counters": counters})
            elif cmd == "inflight":
                # Stores waiting on an event behind ~1 s of GPU work: still pending when the
                # parent kills the daemon.
                cache.fill_random(range(NUM_BLOCKS))
                torch.cuda.synchronize()
                torch.cuda._sleep(int(cfg.get("sleep_cycles", 2_000_000_000)))
                event = reg.record_event()
                half = NUM_BLOCKS // 2
                jobs = [s.submit_store(ns, reg, random_keys(rng, half),
                                       list(range(i * half, (i + 1) * half)), event=event)
                        for i in range(2)]
                conn.send({"kind": "submitted", "jobs": jobs})
            elif cmd == "wait_failed":
                done = s.wait_jobs(jobs, timeout=60.0)  # TimeoutError = the hang this guards
                report = {j: (c.ok, len(c.failed_blocks), c.error) for j, c in done.items()}
                conn.send({"kind": "failed", "report": report, "connected": s.connected})
                torch.cuda.synchronize()
            elif cmd == "close":
                s.close()
                conn.send({"kind": "closed"})
                return
            else:
                raise ValueError(f"unknown command {cmd!r}")
    except BaseException:
        conn.send({"kind": "error", "error": traceback.format_exc()})
    finally:
        conn.close()


# ---------------------------------------------------------------------- test side


def _recv(conn, proc, what: str, timeout: float = CHILD_TIMEOUT_S):
    if not conn.poll(timeout):
        raise AssertionError(f"{what}: no message within {timeout}s (exit code {proc.exitcode})")
    msg = conn.recv()
    assert msg.get("kind") != "error", f"{what} failed in the engine process:\n{msg['error']}"
    return msg


class Engine:
    def __init__(self, cfg: Dict[str, Any]) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=restart_engine, args=(cfg, child), daemon=True)
        self.proc.start()
        child.close()

    def ask(self, cmd: str, what: Optional[str] = None, timeout: float = CHILD_TIMEOUT_S):
        self.conn.send(cmd)
        return _recv(self.conn, self.proc, what or cmd, timeout)

    def stop(self) -> None:
        if self.proc.is_alive():
            try:
                self.conn.send("close")
                self.conn.poll(30)
            except (BrokenPipeError, OSError):
                pass
            self.proc.join(30)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(10)
        self.conn.close()


@pytest.fixture
def daemons():
    """Daemons of the test (the first plus restarts on its socket); cleaned up after."""
    started = []
    yield started
    for d in started:
        d.kill()
    if started:
        started[0].cleanup()


def _restart(old: Daemon, daemons) -> Daemon:
    """A new kvstratad on old's socket (old must be down)."""
    assert not old.running()
    new = Daemon.__new__(Daemon)
    new.__dict__.update(old.__dict__)
    new.log_path = old.workdir / f"kvstratad-{len(daemons)}.log"
    new.proc = None
    daemons.append(new)
    return new.start()


def _check_cuda(d: Daemon) -> None:
    with kvstrata.Client(d.endpoint, timeout=30.0) as c:
        if not c.get_status().cuda_enabled:
            pytest.fail("kvstratad reports cuda_enabled=false\n" + d.log_tail(), pytrace=False)


def _registered(d: Daemon, session_id: int, fingerprint: str, namespace_id: int) -> None:
    with kvstrata.Client(d.endpoint, timeout=30.0) as c:
        assert session_id in {s.session_id for s in c.list_sessions().sessions}
        listed = {n.fingerprint: n for n in c.list_namespaces().namespaces}
        assert fingerprint in listed and listed[fingerprint].namespace_id == namespace_id


@pytest.mark.parametrize("how", ["sigkill", "sigterm"])
def test_engine_reregisters_after_daemon_restart(daemons, how):
    d = Daemon({"l1.capacity": "1GiB"})
    daemons.append(d)
    d.start()
    _check_cuda(d)
    salt = f"gpu-restart-{os.getpid()}-{how}"
    engine = Engine(dict(endpoint=d.endpoint, seed=salt, salt=salt))
    try:
        ready = _recv(engine.conn, engine.proc, "engine start")
        assert ready["counters"]["loaded_blocks"] > 0
        if how == "sigkill":
            d.kill()
        else:
            assert d.stop() == 0, d.log_tail()
        d2 = _restart(d, daemons)
        _check_cuda(d2)
        msg = engine.ask("wait_reconnect", timeout=RECONNECT_TIMEOUT_S + 30)
        assert msg["generation"] == 1
        assert msg["session_id"] != ready["session_id"]
        assert msg["fingerprint"] == ready["fingerprint"]
        assert "invalid context" not in msg["last_error"].lower(), msg["last_error"]
        assert "invalid context" not in d2.log_tail(400).lower(), d2.log_tail()
        _registered(d2, msg["session_id"], msg["fingerprint"], msg["namespace_id"])
        rt = engine.ask("roundtrip", "store/load after the restart")
        assert rt["counters"]["loaded_blocks"] > 0
        assert d2.running(), d2.log_tail()
    finally:
        engine.stop()
    assert engine.proc.exitcode == 0, f"engine exited with {engine.proc.exitcode}"


def test_restart_with_jobs_in_flight_fails_them(daemons):
    d = Daemon({"l1.capacity": "1GiB"})
    daemons.append(d)
    d.start()
    _check_cuda(d)
    salt = f"gpu-restart-inflight-{os.getpid()}"
    engine = Engine(dict(endpoint=d.endpoint, seed=salt, salt=salt))
    try:
        _recv(engine.conn, engine.proc, "engine start")
        sub = engine.ask("inflight", "submitting the stores")
        assert len(sub["jobs"]) == 2
        d.kill()  # While the stores wait on the event behind the GPU sleep.
        failed = engine.ask("wait_failed", "waiting for the jobs of the killed daemon", 90.0)
        for job, (ok, n_failed, error) in failed["report"].items():
            assert not ok and n_failed == NUM_BLOCKS // 2, (job, ok, n_failed, error)
            assert error
        d2 = _restart(d, daemons)
        _check_cuda(d2)
        msg = engine.ask("wait_reconnect", timeout=RECONNECT_TIMEOUT_S + 30)
        assert msg["generation"] == 1
        assert "invalid context" not in msg["last_error"].lower(), msg["last_error"]
        rt = engine.ask("roundtrip", "store/load after the restart")
        assert rt["counters"]["loaded_blocks"] > 0
    finally:
        engine.stop()
    assert engine.proc.exitcode == 0, f"engine exited with {engine.proc.exitcode}"
