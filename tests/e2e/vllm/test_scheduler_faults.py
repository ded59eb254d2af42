"""KVStrataConnector in vLLM's real Scheduler when the daemon or a tier fails: kvstratad
unreachable at start, killed mid-run and restarted, restarted onto its L2, and the load
planner pricing out a stalled tier or a compute faster than any load. CPU, a real kvstratad
(as test_scheduler.py, whose helpers these tests share)."""
from __future__ import annotations

import logging
import time

from harness import BLOCK, Engine
from kvs_testing import wait_until
from test_scheduler import (PROMPT, drain_stores, ext, hit_sources, run_and_verify, slow_compute,
                            warm)


def test_daemon_unreachable_at_start_then_back(model_dir, workdir, engines, caplog):
    """No daemon: every lookup is a miss, nothing fails, one warning. The daemon starts:
    the connector connects (reconnect_interval_s) and stores/hits resume."""
    from kvs_testing import Daemon

    d = Daemon(workdir)
    extra = {"endpoint": d.endpoint, "reconnect_interval_s": 0.2}
    caplog.set_level(logging.WARNING, logger="kvstrata_vllm")
    e = engines(model_dir, extra)
    for i in range(3):
        e.add(PROMPT[i:])
    e.run()
    assert len(e.finished) == 3
    assert e.stats.get("hit_tokens", 0) == 0 and e.stats.get("stored_units", 0) == 0
    down = [r for r in caplog.records if "unreachable" in r.getMessage()]
    assert len(down) == 2, [r.getMessage() for r in caplog.records]   # scheduler + worker
    d.start()
    try:
        assert wait_until(lambda: e.connector.scheduler.link.session() is not None and
                          e.workers[0].connector.worker.link.session() is not None, 10)
        r = e.add(PROMPT)
        e.run()
        drain_stores(e)
        assert e.stats["stored_units"] == 6
        e2 = engines(model_dir, extra)
        r2 = e2.add(PROMPT)
        run_and_verify(e2, r2.request_id)
        assert e2.stats["loaded_units"] == 6
        del r
    finally:
        d.stop()


def test_daemon_killed_mid_run_and_restarted(model_dir, workdir, engines):
    """SIGKILL the daemon between steps: requests complete (misses / failed loads are
    recomputed); after a restart on the same socket and L2 directory the sessions
    reconnect, re-register, and hits come back from L2."""
    from kvs_testing import Daemon

    settings = {"l2.enabled": "true", "l2.path": str(workdir / "l2")}
    d = Daemon(workdir, settings).start()
    try:
        extra = {"endpoint": d.endpoint, "reconnect_interval_s": 0.2}
        first = None
        e = engines(model_dir, extra)
        r = e.add(PROMPT)
        e.run()
        drain_stores(e)
        first = e.outputs[r.request_id]
        # Let write-through to L2 finish before the kill.
        import time
        time.sleep(1.0)
        e2 = engines(model_dir, extra)
        r2 = e2.add(PROMPT)
        e2.step()                        # lookup done, load planned
        d.kill()                         # the daemon dies before the load runs
        run_and_verify(e2, r2.request_id)
        assert e2.outputs[r2.request_id] == first
        for i in range(3):               # keeps serving while the daemon is gone
            e2.add(PROMPT[i + 1:])
        e2.run()
        d = Daemon(workdir, settings).start()
        s = e2.connector.scheduler.link.session
        assert wait_until(lambda: s() is not None, 15), "scheduler did not reconnect"
        assert wait_until(lambda: e2.workers[0].connector.worker.link.session() is not None, 15)
        # The old engine keeps serving (stores resume on the re-registered namespace) ...
        r3 = e2.add(PROMPT[::-1])
        run_and_verify(e2, r3.request_id)
        e2.drain_stores()
        assert e2.stats.get("stored_units", 0) == 6, e2.stats
        # ... and a new engine gets those units from the restarted daemon.
        e3 = engines(model_dir, extra)
        r4 = e3.add(PROMPT[::-1])
        run_and_verify(e3, r4.request_id)
        assert e3.stats.get("hit_tokens", 0) == 6 * BLOCK, e3.stats
    finally:
        d.stop() if d.running() else d.kill()


def test_hits_from_l2_after_daemon_restart(model_dir, workdir, engines):
    """A daemon restarted on the same L2 directory serves the units from L2 (reported to
    vLLM as DISK hits), byte-exact."""
    from kvs_testing import Daemon

    settings = {"l2.enabled": "true", "l2.path": str(workdir / "l2")}
    d = Daemon(workdir, settings).start()
    extra = {"endpoint": d.endpoint}
    try:
        e = engines(model_dir, extra)
        e.add(PROMPT)
        e.run()
        e.drain_stores()
        d.stop()
        d = Daemon(workdir, settings).start()
        e2 = engines(model_dir, extra)
        r = e2.add(PROMPT)
        e2.step()
        assert hit_sources(e2, r) in (None, {"DISK": 6 * BLOCK})
        run_and_verify(e2, r.request_id)
        assert e2.stats.get("hit_tokens", 0) == 6 * BLOCK, e2.stats
        assert e2.stats.get("loaded_units", 0) == 6 and not e2.invalid_reported, e2.stats
    finally:
        d.stop() if d.running() else d.kill()


def l2_daemon(workdir):
    """A daemon with an L2 under workdir, and the connector options of a planner on it."""
    from kvs_testing import Daemon
    settings = {"l2.enabled": "true", "l2.path": str(workdir / "l2")}
    d = Daemon(workdir, settings).start()
    return d, settings, {"endpoint": d.endpoint, "load_planner": "on"}


def stored_then_l2_only(d, workdir, settings, model_dir, engines, extra):
    """An engine computes and stores PROMPT; the daemon restarts, so its units are in L2
    only. Returns (the engine, its request, the restarted daemon)."""
    from kvs_testing import Daemon
    e = engines(model_dir, extra)
    first = e.add(PROMPT)
    e.run()
    e.drain_stores()
    d.stop()
    return e, first, Daemon(workdir, settings).start()


def serve_prompt(model_dir, engines, extra, want):
    """A fresh engine (slow compute: a load pays) serves PROMPT, verified, its output `want`."""
    e = engines(model_dir, extra)
    slow_compute(e)
    r = e.add(PROMPT)
    run_and_verify(e, r.request_id)
    assert e.outputs[r.request_id] == want
    return e


def test_planner_recomputes_a_stalled_tier_and_promotes_it(model_dir, workdir, engines):
    """load_planner=on: a hit held only in an L2 that stalled (64 MiB measured at 10 min)
    is recomputed at once, never held for the disk; the probe's promotion (the tiny model's
    whole hit is under PROBE_BYTES) brings its units up to L1 (timed by the promotion watch:
    the planner's L2 sample), where the next engine's planner loads them, byte-exact, and
    times that load too."""
    from kvstrata import Tier

    d, settings, extra = l2_daemon(workdir)
    try:
        e, first, d = stored_then_l2_only(d, workdir, settings, model_dir, engines, extra)
        e2 = engines(model_dir, extra)
        slow_compute(e2)
        speeds = e2.connector.scheduler.planner.tiers
        speeds.add(int(Tier.L2), 64 << 20, 600_000.0)
        r = e2.add(PROMPT)
        so = e2.step()
        assert [n.req_id for n in so.scheduled_new_reqs] == [r.request_id]
        assert so.scheduled_new_reqs[0].num_computed_tokens == 0   # no wait for the disk
        run_and_verify(e2, r.request_id)
        assert e2.stats.get("plan_recompute") == 1 and not e2.stats.get("loaded_units"), e2.stats
        assert e2.outputs[r.request_id] == e.outputs[first.request_id]
        assert wait_until(lambda: len(speeds._samples[int(Tier.L2)]) == 2, 10)
        e3 = serve_prompt(model_dir, engines, extra, e.outputs[first.request_id])
        assert e3.stats.get("plan_async") == 1 and e3.stats.get("loaded_units") == 6, e3.stats
        assert e3.connector.scheduler.planner.tiers._samples[int(Tier.L1)]
        assert e3.connector.scheduler.planner.prefill.steps > 0
    finally:
        d.stop() if d.running() else d.kill()


def test_a_recomputed_hit_is_stored_and_a_loaded_one_promoted(model_dir, workdir, engines):
    """load_planner=on, the hit only in L2: the scheduler's lookup promotes nothing. Priced
    out (a stalled L2, its probe not due), the request recomputes at once, the daemon reads
    nothing from L2 (promoted_blocks 0) and the engine stores the units into L1 (L2 holds
    them: not written again, present_writes), where the next engine loads them. After a
    restart (L2 only again) a planner that loads the hit promotes what it loads."""
    from kvs_testing import Daemon
    from kvstrata import Tier, pb

    def l2(d):
        with d.client() as c:
            return next(t for t in c.list_tiers().tiers if t.tier == pb.TIER_L2_LOCAL)

    d, settings, extra = l2_daemon(workdir)
    try:
        e, first, d = stored_then_l2_only(d, workdir, settings, model_dir, engines, extra)
        e2 = engines(model_dir, extra)
        slow_compute(e2)
        plans = e2.connector.scheduler.plans
        plans.planner.tiers.add(int(Tier.L2), 64 << 20, 600_000.0)
        plans.watch._probed[int(Tier.L2)] = time.monotonic()   # probed just now
        r = e2.add(PROMPT)
        run_and_verify(e2, r.request_id)
        e2.drain_stores()
        assert e2.stats.get("plan_recompute") == 1 and not e2.stats.get("loaded_units"), e2.stats
        assert e2.stats.get("stored_units") == 6, e2.stats
        assert e2.outputs[r.request_id] == e.outputs[first.request_id]
        t = l2(d)
        assert t.promoted_blocks == 0 and t.read_bytes == 0, t
        assert t.present_writes == 6 and t.written_blocks == 0, t
        e3 = serve_prompt(model_dir, engines, extra, e.outputs[first.request_id])
        assert e3.stats.get("loaded_units") == 6, e3.stats
        assert l2(d).promoted_blocks == 0   # loaded from L1
        d.stop()
        d = Daemon(workdir, settings).start()   # L2 only again: a load decision
        e4 = serve_prompt(model_dir, engines, extra, e.outputs[first.request_id])
        assert e4.stats.get("plan_async") == 1 and e4.stats.get("loaded_units") == 6, e4.stats
        assert l2(d).promoted_blocks == 6
    finally:
        d.stop() if d.running() else d.kill()


def test_planner_recomputes_when_compute_is_faster(model_dir, daemon, engines):
    """A tiny model computes its 96 tokens faster than any load's latency: the planner
    recomputes (and says so in its counters), the output is the same."""
    first = warm(engines, model_dir, daemon)
    e = engines(model_dir, ext(daemon, load_planner="on"))
    e.connector.scheduler.planner.prefill.predict_ms = lambda tokens, context: 0.001 * tokens
    r = e.add(PROMPT)
    run_and_verify(e, r.request_id)
    assert e.stats.get("plan_recompute") == 1 and not e.stats.get("loaded_units"), e.stats
    assert e.stats.get("plan_unloaded_tokens") == 6 * BLOCK
    assert e.outputs[r.request_id] == first
