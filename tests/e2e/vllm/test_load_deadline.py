"""Loads that give up at their deadline (issue 43): vLLM's real Scheduler (CPU, 0.33 and
0.26) with the load planner on, against a real kvstratad whose L2 stalls on demand
(stalled_mount.py: opening a block file for reading hangs while a flag exists). A planner
with no measurements prices the stalled L2 at its prior (fast) and loads; the load gives up
at its deadline -- the request gets its first token within its recompute time, the leading
units that did land are kept, the output and every KV byte are the engine's own -- the
give-up is counted (load_gave_up, also in the daemon's GetStats), taught to the planner,
and once the mount recovers the promotions the lookup started land in L1, where the next
engine loads them."""
from __future__ import annotations

import time
from typing import Iterator, List, Tuple

import pytest

import kvstrata
from kvs_testing import Daemon, wait_until
from stalled_mount import StalledMount
from test_planner_stats import client_counters
from test_scheduler import PROMPT, ext, run_and_verify, slow_compute

MS_PER_TOKEN = 10.0         # the planner's view of the engine: PROMPT recomputes in ~1 s
L1, L2 = int(kvstrata.Tier.L1), int(kvstrata.Tier.L2)


@pytest.fixture
def stalled(workdir) -> Iterator[Tuple[Daemon, StalledMount]]:
    """A kvstratad with an L2 that stalls on demand; recovered before it stops."""
    mount = StalledMount.build(workdir)
    if mount is None:
        pytest.skip("no C compiler for the stalled-mount library")
    d = Daemon(workdir, {"l2.enabled": "true", "l2.path": str(workdir / "l2")},
               env=mount.env()).start()
    try:
        yield d, mount
    finally:
        mount.recover()
        d.stop() if d.running() else d.kill()


def warm_into_l2(engines, model_dir, d: Daemon, in_l1: int,
                 tp: int = 1) -> Tuple[List[int], List[bytes]]:
    """Run PROMPT once, wait for its 6 units' write-down to L2 (each rank's), then evict all
    but the first `in_l1` from L1. Returns its output and its unit keys."""
    e = engines(model_dir, ext(d), tp=tp)
    r = e.add(PROMPT)
    e.run()
    e.drain_stores()
    sched = e.connector.scheduler
    keys = sched._keys(r.block_hashes, 0, 6)

    def l2_written() -> bool:
        with d.client(timeout=10.0) as c:
            tier = next(t for t in c.list_tiers().tiers if t.tier == kvstrata.pb.TIER_L2_LOCAL)
        return tier.written_blocks >= 6 * tp and tier.queue_depth == 0

    assert wait_until(l2_written, 20.0)
    with d.client(timeout=10.0) as c:
        for rank in range(tp):
            ns = sched.link.namespaces[(0, rank)]
            c.evict(fingerprint=ns.fingerprint, keys=keys[in_l1:],
                    tier=kvstrata.pb.TIER_L1_DRAM)
    for rank in range(tp):
        assert tiers_of(d, sched, keys, rank) == [L1] * in_l1 + [L2] * (6 - in_l1)
    return e.outputs[r.request_id], keys


def tiers_of(d: Daemon, sched, keys: List[bytes], rank: int = 0) -> List[int]:
    s = sched.link.session()
    r = s.lookup(sched.link.namespaces[(0, rank)], keys)
    return [int(t) for t in r.tiers[:r.hit_blocks]]


def first_token(e, req) -> Tuple[float, int]:
    """Step until `req` has its first output token: (seconds it took from now, the tokens
    vLLM counted computed when it scheduled the request)."""
    t0 = time.monotonic()
    computed = None
    for _ in range(100_000):
        so = e.step()
        for new in so.scheduled_new_reqs:
            if new.req_id == req.request_id and computed is None:
                computed = new.num_computed_tokens
        if e.outputs[req.request_id]:
            return time.monotonic() - t0, computed
        time.sleep(0.002)
    raise AssertionError("no first token")


def test_a_load_from_a_stalled_tier_gives_up_within_the_recompute_time(model_dir, engines,
                                                                         stalled):
    d, mount = stalled
    first, keys = warm_into_l2(engines, model_dir, d, in_l1=0)
    mount.stall()
    e = engines(model_dir, ext(d, load_planner="on"))
    slow_compute(e, MS_PER_TOKEN)
    sched = e.connector.scheduler
    assert not sched.planner.tiers._samples[L2]      # nothing measured yet
    r = e.add(PROMPT)
    took, computed = first_token(e, r)
    # The plan loaded all 6 units (L2 at its prior); the load gave up at its floor
    # (twice its prediction + 50 ms): nothing landed, vLLM recomputed from token 0.
    assert e.stats.get("plan_async") == 1, e.stats
    assert e.stats.get("load_gave_up") == 1, e.stats
    assert e.stats.get("load_gave_up_tokens") == 6 * 16, e.stats
    assert e.stats.get("load_gave_up_units") == 6 and not e.stats.get("loaded_units"), e.stats
    assert computed == 0
    recompute_s = 100 * MS_PER_TOKEN / 1e3
    assert 0.05 <= took < recompute_s, took
    run_and_verify(e, r.request_id)
    assert e.outputs[r.request_id] == first
    # The planner learnt that L2 took at least that long for the load's bytes (a
    # censored sample, in place of the running one the scheduler counted while it waited),
    # and the promotion watch times the units that did not land (still stalled).
    slow = {s.key: s.ms for s in sched.planner.tiers._samples[L2]}
    assert slow.get(r.request_id, 0) >= 50.0, slow
    assert any(k.startswith("promotion:") for k in slow), slow
    sched.link.session().heartbeat()
    counters = client_counters(d)
    assert counters["load_gave_up"] == 1 and counters["load_gave_up_tokens"] == 96, counters
    # The mount recovers: the promotions the lookup started land in L1, where the next
    # engine finds and loads them.
    mount.recover()
    assert wait_until(lambda: tiers_of(d, sched, keys) == [L1] * 6, 20.0), tiers_of(d, sched, keys)
    e3 = engines(model_dir, ext(d, load_planner="on"))
    slow_compute(e3, MS_PER_TOKEN)
    r3 = e3.add(PROMPT)
    run_and_verify(e3, r3.request_id)
    assert e3.stats.get("loaded_units") == 6 and not e3.stats.get("load_gave_up"), e3.stats
    assert e3.outputs[r3.request_id] == first


@pytest.mark.parametrize("tp", [1, 2])
def test_a_load_that_gives_up_keeps_the_units_that_landed(model_dir, engines, stalled, tp):
    """Units 0-2 in L1, 3-5 in a stalled L2: the L1 units land at once, the load waits for
    the rest while stopping still meets the recompute time (P_0 - P_3: ~0.48 s), then gives
    up; vLLM keeps the 48 tokens loaded and computes the other 52. With 2 tensor-parallel
    ranks each gives up on its own; the scheduler counts the request once."""
    d, mount = stalled
    first, _ = warm_into_l2(engines, model_dir, d, in_l1=3, tp=tp)
    mount.stall()
    e = engines(model_dir, ext(d, load_planner="on"), tp=tp)
    slow_compute(e, MS_PER_TOKEN)
    r = e.add(PROMPT)
    took, computed = first_token(e, r)
    assert e.stats.get("load_gave_up") == 1 and e.stats.get("load_gave_up_tokens") == 48, \
        e.stats
    assert e.stats.get("loaded_units") == 3 * tp, e.stats
    assert e.stats.get("load_gave_up_units") == 3 * tp, e.stats
    assert computed == 48
    deadline_s = (100 - 52) * MS_PER_TOKEN / 1e3   # P_0 - P_3 = the compute of the 3 units
    assert deadline_s - 0.05 <= took < 100 * MS_PER_TOKEN / 1e3 + 0.2, took
    run_and_verify(e, r.request_id)
    assert e.outputs[r.request_id] == first
