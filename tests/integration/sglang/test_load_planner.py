"""The load planner in the SGLang backend (kvstrata_sglang.planner, option load_planner):
batch_exists answers only the leading pages worth prefetching. Real SGLang host pools and a
real kvstratad with an L2 directory: L1 hits answered in full; an L2 that stalled priced
out (the answer stops at its first page) while a probe promotes the pages cut into L1 (up
to its PROBE_BYTES: no more) and times it, answered in full next time; the planner off (or "auto" outside a GPU
engine) answering every page stored. With a fake clock and no daemon: a get stuck on a
tier prices that tier out before it ends. A get of pages from an L2 that stalls after the
answer (stalled_mount.py) gives up at its deadline, keeping the pages that landed."""
from __future__ import annotations

import time

import pytest

import kvstrata
from kvs_testing import Daemon, wait_until
from stalled_mount import StalledMount
from kvstrata_sglang.keys import page_keys
from kvstrata_sglang.options import parse_options
from kvstrata_sglang.planner import EngineModel, PagePlanner, engine_model, planner_wanted
from kvstrata.planning import prefill_flops
from sglang_pools import PAGE, alloc_pages, fill_pages, keys_for, make_config, make_pool, page_bytes

L1, L2 = int(kvstrata.Tier.L1), int(kvstrata.Tier.L2)
STALLED_MS = 600_000.0     # 64 MiB measured at 10 minutes: a stalled mount
PAGE_BYTES = 64 << 10      # the fake-clock tests' pages (16 tokens of a small GQA model)


def l2_daemon(daemon_factory, tmp_path, env=None) -> Daemon:
    return daemon_factory({"l2.enabled": "true", "l2.capacity": "256MiB",
                           "l2.path": str(tmp_path / "l2")}, env=env)


def l2_tier(daemon: Daemon):
    with daemon.client(timeout=10.0) as c:
        return next(t for t in c.list_tiers().tiers if t.tier == kvstrata.pb.TIER_L2_LOCAL)


def store_in_l2(d: Daemon, b, pool, keys):
    """Store the pages, wait for their write-down to L2, then drop L1: they live in L2."""
    src = alloc_pages(pool, len(keys))
    fill_pages(pool, src, 77)
    assert b.batch_set_v1(keys, src) == [True] * len(keys)
    assert wait_until(lambda: l2_tier(d).written_blocks >= len(keys) and
                      l2_tier(d).queue_depth == 0, 20.0), l2_tier(d)
    with d.client(timeout=10.0) as c:
        for _ in c.clear(fingerprint=b.namespace.fingerprint, tier=kvstrata.pb.TIER_L1_DRAM):
            pass
    return src


def tiers_of(b, keys):
    r = b.session.lookup(b.namespace, page_keys(keys))
    return [int(t) for t in r.tiers[:r.hit_blocks]]


def test_option_and_auto_mode():
    assert parse_options({}).load_planner == "auto"
    assert parse_options({"load_planner": "off"}).load_planner == "off"
    with pytest.raises(ValueError, match="load_planner"):
        parse_options({"load_planner": "yes"})
    generic = prefill_flops(None)
    assert planner_wanted("auto", EngineModel(generic, "cuda", 8192, "t"))
    assert not planner_wanted("auto", EngineModel(generic, "cpu", 8192, "t"))
    assert not planner_wanted("auto", EngineModel(generic, None, 8192, "t"))
    assert planner_wanted("on", EngineModel(generic, None, 8192, "t"))
    assert not planner_wanted("off", EngineModel(generic, "cuda", 8192, "t"))
    # Outside an SGLang engine (these tests): no server arguments, a generic 8B model.
    assert engine_model().device is None


def test_l1_hits_are_answered_in_full(daemon, backends):
    pool = make_pool("mha", "page_first", pages=48)
    b = backends(make_config({"load_planner": "on"}, endpoint=daemon.endpoint), pool)
    assert b.planner is not None
    keys = keys_for("planner-l1", 16)
    src = alloc_pages(pool, 16)
    fill_pages(pool, src, 5)
    assert b.batch_set_v1(keys, src) == [True] * 16
    assert b.batch_exists(keys) == 16
    assert b.counters["plan_async"] == 1 and b.counters["plan_unloaded_tokens"] == 0
    dst = alloc_pages(pool, 16)
    assert b.batch_get_v1(keys, dst) == [True] * 16
    assert page_bytes(pool, dst) == page_bytes(pool, src)
    assert b.planner.tiers._samples[L1], "the get is a sample of L1"
    assert b.batch_exists(keys + keys_for("planner-l1-missing", 4)) == 16


def test_stalled_tier_is_priced_out_and_promoted(daemon_factory, backends, tmp_path):
    d = l2_daemon(daemon_factory, tmp_path)
    pool = make_pool("mha", "page_first", pages=96)
    b = backends(make_config({"load_planner": "on", "timeout_s": 10.0}, endpoint=d.endpoint),
                 pool)
    keys = keys_for("planner-stall", 32)
    src = store_in_l2(d, b, pool, keys)
    assert tiers_of(b, keys) == [L2] * 32

    # An unstalled L2 (the prior): 16 pages' load beats computing their 256 tokens. The
    # engine is made 100x slower for this get, so that its give-up deadline (what computing
    # the pages would take) is not passed on a loaded machine: this part is about the get
    # timing the tier and promoting, not about the deadline (tested below).
    prefill = b.planner.planner.prefill
    prior = (prefill.overhead_ms, prefill.ms_per_flop)
    prefill.ms_per_flop = prior[1] * 100
    assert b.batch_exists(keys[:16]) == 16
    dst = alloc_pages(pool, 16)
    assert b.batch_get_v1(keys[:16], dst) == [True] * 16   # promoted into L1 on the way
    assert len(b.planner.tiers._samples[L2]) == 1          # the get timed the tier
    prefill.overhead_ms, prefill.ms_per_flop = prior
    assert tiers_of(b, keys) == [L1] * 16 + [L2] * 16

    # L2 stalls: the answer stops where L2 starts; the L1 pages are still worth it.
    b.planner.tiers.add(L2, 64 << 20, STALLED_MS)
    assert b.batch_exists(keys) == 16
    assert b.counters["plan_partial"] == 1
    assert b.counters["plan_unloaded_tokens"] == 16 * PAGE
    # The pages cut are promoted into L1 by a probe (under its PROBE_BYTES) and timed.
    assert wait_until(lambda: tiers_of(b, keys) == [L1] * 32, 10.0), tiers_of(b, keys)
    assert wait_until(lambda: len(b.planner.tiers._samples[L2]) == 3, 10.0)
    # The next request finds every page in L1: answered in full, loaded byte-exact.
    assert b.batch_exists(keys) == 32
    dst = alloc_pages(pool, 32)
    assert b.batch_get_v1(keys, dst) == [True] * 32
    assert page_bytes(pool, dst) == page_bytes(pool, src)


def test_a_hit_only_in_a_stalled_tier_is_recomputed(daemon_factory, backends, tmp_path):
    d = l2_daemon(daemon_factory, tmp_path)
    pool = make_pool("mha", "page_first", pages=48)
    b = backends(make_config({"load_planner": "on"}, endpoint=d.endpoint), pool)
    keys = keys_for("planner-recompute", 16)
    store_in_l2(d, b, pool, keys)
    b.planner.tiers.add(L2, 64 << 20, STALLED_MS)
    assert b.batch_exists(keys) == 0
    assert b.counters["plan_recompute"] == 1
    assert b.counters["plan_unloaded_tokens"] == 16 * PAGE
    assert wait_until(lambda: tiers_of(b, keys) == [L1] * 16, 10.0), tiers_of(b, keys)
    # The decision goes with the session's heartbeats: the daemon's `kvstrata stats`.
    b.session.heartbeat()
    with d.client(timeout=10.0) as c:
        counters = {x.name: x.value for x in c.get_stats().client_counters}
    assert counters == {"plan_async": 0, "plan_partial": 0, "plan_recompute": 1,
                        "plan_unloaded_tokens": 16 * PAGE, "load_gave_up": 0,
                        "load_gave_up_tokens": 0}, counters


def test_pages_cut_past_the_probe_stay_below_l1(daemon_factory, backends, tmp_path,
                                                monkeypatch):
    """Pages the planner cuts are not promoted (SGLang computes and stores them again):
    only the probe's, at most PROBE_BYTES, at most one probe per tier a second."""
    from kvstrata.planning import promotion_watch

    d = l2_daemon(daemon_factory, tmp_path)
    pool = make_pool("mha", "page_first", pages=48)
    b = backends(make_config({"load_planner": "on"}, endpoint=d.endpoint), pool)
    monkeypatch.setattr(promotion_watch, "PROBE_BYTES", 4 * b.planner.page_bytes)
    monkeypatch.setattr(promotion_watch, "PROBE_EVERY_S", 600.0)
    keys = keys_for("planner-probe", 16)
    store_in_l2(d, b, pool, keys)
    b.planner.tiers.add(L2, 64 << 20, STALLED_MS)
    assert b.batch_exists(keys) == 0
    assert wait_until(lambda: tiers_of(b, keys) == [L1] * 4 + [L2] * 12, 10.0), tiers_of(b, keys)
    assert b.batch_exists(keys[4:]) == 0          # the next probe is not due yet
    time.sleep(0.3)
    assert tiers_of(b, keys) == [L1] * 4 + [L2] * 12


def test_a_get_from_a_tier_that_stalls_gives_up_at_its_deadline(daemon_factory, backends,
                                                                 tmp_path):
    """8 pages in L1, 8 in an L2 the planner has not measured (answered in full at its
    prior); L2 stalls before the get: the get loads the L1 pages, waits for the others up
    to its deadline (a few ms: the prior's fast GPU computes them in about that), then
    answers False for them -- SGLang keeps the 8 loaded and computes the rest. Counted,
    in the daemon's GetStats too; once the mount recovers the promotions the get started
    land in L1 and the next get loads every page byte-exact."""
    mount = StalledMount.build(tmp_path)
    if mount is None:
        pytest.skip("no C compiler for the stalled-mount library")
    d = l2_daemon(daemon_factory, tmp_path, env=mount.env())
    try:
        pool = make_pool("mha", "page_first", pages=64)
        b = backends(make_config({"load_planner": "on", "timeout_s": 10.0},
                                 endpoint=d.endpoint), pool)
        keys = keys_for("planner-deadline", 16)
        src = store_in_l2(d, b, pool, keys)
        b.session.lookup(b.namespace, page_keys(keys[:8]), lease=True, lease_ttl_ms=1000)
        assert wait_until(lambda: tiers_of(b, keys) == [L1] * 8 + [L2] * 8, 10.0)
        mount.stall()
        assert b.batch_exists(keys) == 16 and b.counters["plan_async"] == 1
        dst = alloc_pages(pool, 16)
        t0 = time.monotonic()
        assert b.batch_get_v1(keys, dst) == [True] * 8 + [False] * 8
        assert time.monotonic() - t0 < 0.5
        assert page_bytes(pool, dst)[:8] == page_bytes(pool, src)[:8]
        assert b.counters["load_gave_up"] == 1, b.counters
        assert b.counters["load_gave_up_tokens"] == 8 * PAGE, b.counters
        assert b.planner.tiers._samples[L2], "the get is a (censored) sample of L2"
        b.session.heartbeat()
        with d.client(timeout=10.0) as c:
            counters = {x.name: x.value for x in c.get_stats().client_counters}
        assert counters["load_gave_up"] == 1, counters
        mount.recover()
        assert wait_until(lambda: tiers_of(b, keys) == [L1] * 16, 10.0), tiers_of(b, keys)
        assert b.batch_exists(keys) == 16
        dst = alloc_pages(pool, 16)
        assert b.batch_get_v1(keys, dst) == [True] * 16
        assert page_bytes(pool, dst) == page_bytes(pool, src)
        assert b.counters["load_gave_up"] == 1
    finally:
        mount.recover()


@pytest.mark.parametrize("mode", ["off", "auto"])
def test_planner_off_answers_every_page(daemon_factory, backends, tmp_path, mode):
    d = l2_daemon(daemon_factory, tmp_path)
    pool = make_pool("mha", "page_first", pages=48)
    b = backends(make_config({"load_planner": mode}, endpoint=d.endpoint), pool)
    assert b.planner is None   # "auto" outside a GPU engine is off
    keys = keys_for(f"planner-{mode}", 8)
    store_in_l2(d, b, pool, keys)
    assert b.batch_exists(keys) == 8
    assert not any(v for k, v in b.counters.items() if k.startswith("plan_"))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_stuck_get_prices_its_tier_out_before_it_ends():
    """A get of L2 pages that runs past twice its prediction counts at once: the next
    request's L2 pages are cut while the first get is still stuck; the get's real time
    replaces the censored sample when it ends."""
    clock = Clock()
    generic = prefill_flops(None)
    p = PagePlanner(None, PAGE, PAGE_BYTES, EngineModel(generic, "cuda", 8192, "t"), clock=clock)
    keys = [bytes([i]) * 32 for i in range(64)]
    assert p.plan(keys[:32], [L2] * 32, None).units == 32   # the prior: L2 pays
    p.answered(keys[:32], [L2] * 32)
    get_id = p.get_started(keys[:32])
    clock.now += 30.0                                        # stuck for 30 s
    assert p.plan(keys[32:], [L2] * 32, None).units == 0
    p.get_ended(get_id, timed=True)
    assert len(p.tiers._samples[L2]) == 1                    # replaced, not added
    p.close()


def test_pages_answered_and_not_fetched_are_the_queue():
    """Pages answered to one request and not fetched yet load before the next request's:
    a large queue on L2 prices the next L2 hit out; pages of the same request (its prefix
    keys) are not its own queue; a queue SGLang never fetches leaves after a while."""
    clock = Clock()
    generic = prefill_flops(None)
    p = PagePlanner(None, PAGE, PAGE_BYTES, EngineModel(generic, "cuda", 8192, "t"), clock=clock)
    queued = [b"q" + bytes([i // 256, i % 256]) + bytes(29) for i in range(4096)]  # 256 MiB
    mine = [bytes([i]) * 32 for i in range(32)]
    assert p.plan(mine, [L2] * 32, None).units == 32
    p.answered(queued, [L2] * len(queued))                  # answered to another request
    assert p.plan(mine, [L2] * 32, None).units == 0
    assert p.plan(mine, [L1] * 32, None).units == 32        # L1 has no queue
    p.answered(mine[:16], [L2] * 16)                        # its own first batch
    prefix = [k.hex() for k in mine[:16]]
    assert p.plan(mine[16:], [L2] * 16, prefix).units == 0   # the other request's queue
    p.answered(mine[16:], [L2] * 16)
    for k in queued:                                        # fetched: off the queue
        p.get_ended(p.get_started([k]), timed=False)
    assert p.plan(mine[:16] + mine[16:], [L2] * 32, None).units == 32
    p.answered(queued, [L2] * len(queued))
    assert p.plan(mine, [L2] * 32, None).units == 0
    clock.now += 60.0                                       # never fetched: forgotten
    assert p.plan(mine, [L2] * 32, None).units == 32
    p.close()
