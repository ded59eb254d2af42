"""The load planner's parts on their own (kvstrata.planning: load_planner, prefill_model,
tier_speeds; kvstrata_vllm.model_flops): decisions from measured speeds, a tier that stalls priced out within seconds
and back when it recovers, an unmeasured planner never betting on a slow tier, the in-step
or asynchronous choice by how busy the engine is. A fake clock; no daemon, no vLLM engine.
The planner inside vLLM's real scheduler against a real kvstratad: test_scheduler.py."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from kvstrata import Tier
from kvstrata.planning import GPU_FLOPS, HALF_LIFE_S, LoadPlanner, PrefillModel, TierSpeeds
from kvstrata_vllm.model_flops import prefill_flops

L1, L2, L3 = int(Tier.L1), int(Tier.L2), int(Tier.L3)
UNIT = 16
UNIT_BYTES = 2 << 20        # Llama-8B: 128 KiB per token, 16 tokens
LLAMA_8B = SimpleNamespace(model_config=SimpleNamespace(hf_text_config=SimpleNamespace(
    hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, head_dim=128,
    num_key_value_heads=8, intermediate_size=14336, vocab_size=128256)))


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def planner(clock: Clock, device_flops: float = GPU_FLOPS) -> LoadPlanner:
    prefill = PrefillModel(prefill_flops(LLAMA_8B), device_flops, chunk_tokens=8192,
                           clock=clock)
    return LoadPlanner(prefill, TierSpeeds(clock=clock))


def next_step(p: LoadPlanner) -> int:
    p.prefill.numbered = getattr(p.prefill, "numbered", 0) + 1
    return p.prefill.numbered


def feed_steps(p: LoadPlanner, clock: Clock, slowdown: float, steps: int = 40) -> None:
    """Prefill steps of 2K-8K tokens, each taking 5 ms plus its FLOPs at GPU_FLOPS /
    slowdown (2.2: an H100's 8B prefill, ~37 us per token at 8K)."""
    for i in range(steps):
        n = 2048 * (1 + i % 4)
        step = next_step(p)
        p.prefill.step_built(step, [(n, 0)], clean=True)
        clock.t += (5 + p.prefill.work(n, 0) * slowdown * 1e3 / GPU_FLOPS) / 1e3
        p.prefill.step_done(step)


def test_flops_of_a_llama_8b():
    f = prefill_flops(LLAMA_8B)
    assert 14e9 < f.linear < 17e9           # 2 x ~8B parameters
    assert f.attention == 4 * 32 * 32 * 128


def test_flops_of_gpt_oss_layers_count_the_window_and_the_active_experts():
    cfg = dict(hidden_size=2880, num_hidden_layers=8, num_attention_heads=64, head_dim=64,
               num_key_value_heads=8, intermediate_size=2880, num_experts_per_tok=4,
               num_local_experts=32, vocab_size=201088, sliding_window=128,
               layer_types=["sliding_attention", "full_attention"] * 4)
    f = prefill_flops(SimpleNamespace(model_config=SimpleNamespace(
        hf_text_config=SimpleNamespace(**cfg))))
    assert f.attention == 4 * 4 * 64 * 64            # the four full-attention layers
    dense = prefill_flops(SimpleNamespace(model_config=SimpleNamespace(
        hf_text_config=SimpleNamespace(**{**cfg, "layer_types": None}))))
    assert dense.attention == 4 * 8 * 64 * 64
    assert f.linear == dense.linear + 4 * 4 * 64 * 64 * 128   # windows: per token


def test_prefill_model_fits_the_engines_steps():
    clock = Clock()
    p = planner(clock)
    prior = p.prefill.predict_ms(8192, 0)
    feed_steps(p, clock, slowdown=3.0)   # three times slower than the prior
    fitted = p.prefill.predict_ms(8192, 0)
    assert prior < fitted
    expected = 5 + p.prefill.work(8192, 0) * 3.0 * 1e3 / GPU_FLOPS
    assert fitted == pytest.approx(expected, rel=0.1)


def test_small_steps_teach_the_fixed_cost_not_the_rate():
    """An eager MoE engine's decodes and 1-token hits take 15-40 ms whatever their few
    tokens' FLOPs: fitted alone they must not set the per-FLOP rate (extrapolated to a
    32K prefill, such noise predicted 20x its real time on an H200,
    bench/results/vllm-gpu-2026-11-28-gpt-oss/NOTES.md)."""
    import random
    rng = random.Random(1)
    clock = Clock()
    p = planner(clock)
    prior = p.prefill.predict_ms(32768, 0)
    for _ in range(40):
        step = next_step(p)
        p.prefill.step_built(step, [(rng.choice([1, 2, 9, 16]), rng.randint(0, 32768))],
                             clean=True)
        clock.t += rng.uniform(0.015, 0.040)
        p.prefill.step_done(step)
    assert 15 <= p.prefill.overhead_ms <= 40
    assert p.prefill.predict_ms(32768, 0) < prior + 4 * 40   # the rate stays the prior's
    feed_steps(p, clock, slowdown=3.0)   # then real prefills: the rate follows them
    expected = 5 + p.prefill.work(8192, 0) * 3.0 * 1e3 / GPU_FLOPS
    assert p.prefill.predict_ms(8192, 0) == pytest.approx(expected, rel=0.25)


def test_steps_with_an_in_step_load_are_not_fitted():
    clock = Clock()
    p = planner(clock)
    before = p.prefill.predict_ms(4096, 0)
    for _ in range(40):
        step = next_step(p)
        p.prefill.step_built(step, [(4096, 0)], clean=False)
        clock.t += 5.0   # a stalled load in the step
        p.prefill.step_done(step)
    assert p.prefill.predict_ms(4096, 0) == before


def test_async_scheduling_steps_overlap():
    """Step k+1 built before step k's output: each step's time starts at the later of its
    build and the previous output."""
    clock = Clock()
    p = planner(clock)
    for _ in range(64):
        a, b = next_step(p), next_step(p)
        p.prefill.step_built(a, [(4096, 0)], clean=True)
        p.prefill.step_built(b, [(4096, 0)], clean=True)
        clock.t += 0.2
        p.prefill.step_done(a)
        clock.t += 0.2
        p.prefill.step_done(b)
    assert p.prefill.step_ms == pytest.approx(200, rel=0.05)


def test_a_step_without_output_does_not_shift_the_others():
    """vLLM runs no forward pass for an empty step: its number never comes back, and the
    next step's time is still its own."""
    clock = Clock()
    p = planner(clock)
    for _ in range(64):
        empty, real = next_step(p), next_step(p)
        p.prefill.step_built(empty, [], clean=False)
        clock.t += 1.0   # idle
        p.prefill.step_built(real, [(4096, 0)], clean=True)
        clock.t += 0.05
        p.prefill.step_done(real)
    assert p.prefill.step_ms == pytest.approx(50, rel=0.05)
    assert len(p.prefill._pending) <= 8


def test_l1_hit_loads_and_a_slow_disk_hit_recomputes():
    clock = Clock()
    p = planner(clock)
    feed_steps(p, clock, slowdown=2.2)     # an H100's 8B prefill
    units = 8192 // UNIT
    plan = p.plan([L1] * units, 0, UNIT, 8192 + 1, UNIT_BYTES, in_step_ok=True)
    assert plan.kind == "in_step" and plan.units == units
    assert plan.ttft_ms < plan.recompute_ms
    # A disk at 1.4 GB/s (the GPU machine's): 1 GiB of an 8K hit takes ~770 ms, the
    # prefill ~300 ms.
    for _ in range(8):
        p.tiers.add(L2, 256 * UNIT_BYTES, 256 * UNIT_BYTES / 1.4e6 + 2)
    plan = p.plan([L2] * units, 0, UNIT, 8192 + 1, UNIT_BYTES, in_step_ok=True)
    assert plan.kind == "recompute" and plan.units == 0


def test_fast_disk_hit_loads_asynchronously():
    clock = Clock()
    p = planner(clock)
    feed_steps(p, clock, slowdown=2.2)
    for _ in range(8):   # 12 GB/s
        p.tiers.add(L2, 256 * UNIT_BYTES, 256 * UNIT_BYTES / 12e6 + 2)
    units = 32768 // UNIT
    plan = p.plan([L2] * units, 0, UNIT, 32768 + 1, UNIT_BYTES, in_step_ok=True)
    assert plan.kind == "async" and plan.units == units and not plan.in_step


def test_l1_then_slow_disk_loads_the_l1_part():
    clock = Clock()
    p = planner(clock)
    feed_steps(p, clock, slowdown=2.2)
    for _ in range(8):
        p.tiers.add(L2, 256 * UNIT_BYTES, 256 * UNIT_BYTES / 0.5e6)
    tiers = [L1] * 256 + [L2] * 256
    plan = p.plan(tiers, 0, UNIT, 512 * UNIT + 1, UNIT_BYTES, in_step_ok=True)
    assert plan.kind == "partial" and plan.units == 256 and plan.in_step
    # A hybrid model's hit is all or nothing.
    whole = p.plan(tiers, 0, UNIT, 512 * UNIT + 1, UNIT_BYTES, in_step_ok=False,
                   partial_ok=False)
    assert whole.units in (0, 512) and whole.kind in ("recompute", "async")


def test_unmeasured_planner_does_not_bet_on_a_disk():
    """No step or transfer measured yet: the priors (a fast device, a slow disk) send an
    L2 hit to recompute and an L1 hit to load."""
    p = planner(Clock())
    units = 8192 // UNIT
    assert p.plan([L2] * units, 0, UNIT, 8193, UNIT_BYTES, in_step_ok=True).kind == "recompute"
    assert p.plan([L3] * units, 0, UNIT, 8193, UNIT_BYTES, in_step_ok=True).kind == "recompute"
    assert p.plan([L1] * units, 0, UNIT, 8193, UNIT_BYTES, in_step_ok=True).units == units


def test_a_stalled_tier_is_priced_out_within_seconds_and_comes_back():
    clock = Clock()
    p = planner(clock)
    feed_steps(p, clock, slowdown=2.2)
    units = 8192 // UNIT
    fast = 256 * UNIT_BYTES / 12e6 + 2
    for _ in range(16):
        p.tiers.add(L2, 256 * UNIT_BYTES, fast)
        clock.t += 0.1
    assert p.plan([L2] * units, 0, UNIT, 8193, UNIT_BYTES, in_step_ok=True).units == units
    # The mount stalls: one load still running 2 s after it began (a censored sample).
    clock.t += 2.0
    p.tiers.add(L2, 16 * UNIT_BYTES, 2000.0, key="stuck")
    assert p.plan([L2] * units, 0, UNIT, 8193, UNIT_BYTES, in_step_ok=True).kind == "recompute"
    clock.t += 0.1
    p.tiers.add(L2, 16 * UNIT_BYTES, 2100.0, key="stuck")   # its real time at last
    assert p.plan([L2] * units, 0, UNIT, 8193, UNIT_BYTES, in_step_ok=True).units == 0
    # It recovers: fresh fast promotions (promotion_watch) outweigh the old stall.
    clock.t += 3 * HALF_LIFE_S
    for _ in range(8):
        clock.t += 0.5
        p.tiers.add(L2, 256 * UNIT_BYTES, fast)
    assert p.plan([L2] * units, 0, UNIT, 8193, UNIT_BYTES, in_step_ok=True).units == units


def test_queue_in_front_counts():
    clock = Clock()
    p = planner(clock)
    feed_steps(p, clock, slowdown=2.2)
    for _ in range(8):
        p.tiers.add(L2, 256 * UNIT_BYTES, 256 * UNIT_BYTES / 6e6 + 2)
    units = 8192 // UNIT
    assert p.plan([L2] * units, 0, UNIT, 8193, UNIT_BYTES, in_step_ok=True).units == units
    p.queue(L2, 4 << 30)     # 4 GiB of this engine's loads ahead of it
    assert p.plan([L2] * units, 0, UNIT, 8193, UNIT_BYTES, in_step_ok=True).units == 0
    p.queue(L2, -(4 << 30))
    assert p.plan([L2] * units, 0, UNIT, 8193, UNIT_BYTES, in_step_ok=True).units == units


def test_busy_engine_loads_l1_asynchronously():
    """Idle: in the step (the lowest TTFT). Busy: the in-step copy would hold every other
    request of the batch, so it loads before the request is scheduled."""
    clock = Clock()
    p = planner(clock)
    feed_steps(p, clock, slowdown=2.2)
    for _ in range(8):
        p.tiers.add(L1, 512 * UNIT_BYTES, 512 * UNIT_BYTES / 20e6)
    units = 8192 // UNIT
    p.batch_requests = 0
    assert p.plan([L1] * units, 0, UNIT, 8193, UNIT_BYTES, in_step_ok=True).kind == "in_step"
    for _ in range(60):   # decode steps of 16 requests, 30 ms each (the step time settles)
        step = next_step(p)
        p.prefill.step_built(step, [(1, 4096)] * 16, clean=True)
        clock.t += 0.03
        p.prefill.step_done(step)
    p.batch_requests = 16
    plan = p.plan([L1] * units, 0, UNIT, 8193, UNIT_BYTES, in_step_ok=True)
    assert plan.kind == "async" and plan.units == units
    # A short load still fits in a step's time.
    p.batch_requests = 2
    assert p.plan([L1] * 4, 0, UNIT, 4 * UNIT + 1, UNIT_BYTES, in_step_ok=True).in_step


def test_tier_speeds_drop_old_samples_and_scale_l1_by_ranks():
    clock = Clock()
    one, two = TierSpeeds(ranks=1, clock=clock), TierSpeeds(ranks=2, clock=clock)
    assert two.gb_per_s(L1) == pytest.approx(2 * one.gb_per_s(L1))
    prior = one.gb_per_s(L2)
    one.add(L2, 1 << 30, 100_000.0)
    assert one.gb_per_s(L2) < prior / 10
    clock.t += 120   # past the horizon
    one.add(L3, 1 << 20, 5.0)
    assert one.gb_per_s(L2) == pytest.approx(prior)
    one.add(L2, 0, 5.0)      # nothing moved: no sample
    one.add(99, 1 << 20, 5.0)   # a tier this client does not know: ignored
    assert one.gb_per_s(L2) == pytest.approx(prior)


def test_a_busy_engine_loads_what_it_would_wait_to_recompute():
    """A disk hit an idle engine recomputes sooner loads once compute is queued in front of
    the request: recomputing waits for that queue, the load runs beside it."""
    clock = Clock()
    p = planner(clock)
    feed_steps(p, clock, slowdown=2.2)
    for _ in range(8):   # a 0.5 GB/s disk: 1 GiB in ~2.1 s, 8K tokens recompute in ~0.3 s
        p.tiers.add(L3, 256 * UNIT_BYTES, 256 * UNIT_BYTES / 0.5e6 + 5)
    units = 8192 // UNIT
    idle = p.plan([L3] * units, 0, UNIT, 8193, UNIT_BYTES, in_step_ok=True)
    assert idle.kind == "recompute" and idle.backlog_ms == 0
    # 16 requests of 8K tokens ahead of it: seconds of prefill.
    backlog = p.prefill.queue_ms(16 * 8192, 16 * p.prefill.work(8192, 0))
    assert backlog > p.load_ms([L3] * units, UNIT_BYTES)
    busy = p.plan([L3] * units, 0, UNIT, 8193, UNIT_BYTES, in_step_ok=True, backlog_ms=backlog)
    assert busy.kind == "async" and busy.units == units
    assert busy.ttft_ms < busy.recompute_ms
    assert busy.recompute_ms == pytest.approx(backlog + idle.recompute_ms)
    # A short queue does not hide a 2 s load.
    short = p.plan([L3] * units, 0, UNIT, 8193, UNIT_BYTES, in_step_ok=True, backlog_ms=50.0)
    assert short.kind == "recompute"


def test_queue_ms_is_the_prefill_of_the_queue_in_chunks():
    clock = Clock()
    p = planner(clock)
    feed_steps(p, clock, slowdown=2.2)
    m = p.prefill
    assert m.queue_ms(0, 0.0) == 0.0
    one = m.queue_ms(4096, m.work(4096, 0))
    assert one == pytest.approx(m.predict_ms(4096, 0))
    two = m.queue_ms(2 * 8192, 2 * m.work(8192, 0))
    assert two == pytest.approx(2 * m.predict_ms(8192, 0))


# ---------------------------------------------------------------- the scheduler's side


def _planning(states):
    from kvstrata_vllm.load_planning import LoadPlanning
    from kvstrata_vllm.stats import StatsCounter
    vllm_config = SimpleNamespace(
        scheduler_config=SimpleNamespace(max_num_batched_tokens=8192),
        model_config=LLAMA_8B.model_config)
    link = SimpleNamespace(namespaces={(0, 0): SimpleNamespace(bytes_per_block=UNIT_BYTES)})
    return LoadPlanning(vllm_config, SimpleNamespace(load_planner="on"), False, 1, link,
                        [(0, 0)], StatsCounter(), lambda: None, lambda: states)


def _state(req_id, arrival, tokens, computed=0, ready=0):
    from kvstrata_vllm.request_state import RequestState
    st = RequestState(SimpleNamespace(request_id=req_id, arrival_time=arrival,
                                      num_tokens=tokens, num_computed_tokens=computed))
    st.ready_tokens = ready
    return st


def test_backlog_counts_the_prefill_of_requests_that_arrived_before():
    states = [_state("a", 1.0, 8193), _state("b", 2.0, 8193, ready=8192),  # b loads it all
              _state("c", 3.0, 4097, computed=4096),                       # decoding
              _state("d", 4.0, 8193, computed=4096), _state("e", 5.0, 8193)]
    lp = _planning(states)
    m = lp.planner.prefill
    assert lp.backlog_ms(states[0].request) == 0.0          # nothing ahead of the first
    a = m.queue_ms(8192, m.work(8192, 0))
    assert lp.backlog_ms(states[1].request) == pytest.approx(a)
    assert lp.backlog_ms(states[3].request) == pytest.approx(a)   # b and c have none left
    ad = m.queue_ms(8192 + 4096, m.work(8192, 0) + m.work(4096, 4096))
    assert lp.backlog_ms(states[4].request) == pytest.approx(ad)
    # The queue is read once per step built: a request's progress counts from the next.
    states[0].request.num_computed_tokens = 8192
    assert lp.backlog_ms(states[4].request) == pytest.approx(ad)
    lp.steps += 1
    d = m.queue_ms(4096, m.work(4096, 4096))
    assert lp.backlog_ms(states[4].request) == pytest.approx(d)


def test_a_load_sample_counts_the_bytes_queued_ahead_of_it():
    """Loads queued behind each other each take the queue's time: their samples count the
    bytes ahead, so the tier's speed stays the copy's, not the queue's."""
    states = [_state(f"r{i}", float(i), 8193) for i in range(4)]
    lp = _planning(states)
    gbps = 50.0
    nbytes = 512 * UNIT_BYTES
    for st in states:
        st.tiers = [L1] * 512
        lp.load_started(st, 0, 512)
    assert lp.planner.queued(L1) == 4 * nbytes
    for i, st in enumerate(states):   # served one after the other at 50 GB/s
        lp.load_ended(st, (i + 1) * nbytes / (gbps * 1e6))
    assert lp.planner.queued(L1) == 0
    assert lp.planner.tiers.gb_per_s(L1) > 0.8 * gbps


def test_a_copy_shorter_than_a_busy_step_loads_in_the_step():
    """The layer-wise copy runs beside the step's compute: a busy batch of long steps waits
    only for what the copy takes beyond a step, so a copy shorter than a step loads in it."""
    clock = Clock()
    p = planner(clock)
    feed_steps(p, clock, slowdown=2.2)
    for _ in range(8):
        p.tiers.add(L1, 512 * UNIT_BYTES, 512 * UNIT_BYTES / 50e6)
    for _ in range(40):   # prefill-heavy steps of 16 requests, 120 ms each
        step = next_step(p)
        p.prefill.step_built(step, [(512, 4096)] * 16, clean=True)
        clock.t += 0.12
        p.prefill.step_done(step)
    p.batch_requests = 16
    units = 8192 // UNIT          # 1 GiB at 50 GB/s: ~21 ms, well inside a 120 ms step
    plan = p.plan([L1] * units, 0, UNIT, 8193, UNIT_BYTES, in_step_ok=True)
    assert plan.kind == "in_step" and plan.load_ms < p.prefill.step_ms
    # A copy a few steps long into the same batch would stall it: asynchronous.
    units = 65536 // UNIT         # 8 GiB: ~170 ms
    plan = p.plan([L1] * units, 0, UNIT, 65537, UNIT_BYTES, in_step_ok=True)
    assert plan.kind == "async"


def test_a_failed_load_past_its_prediction_counts_as_slow():
    """A load that fails after running past its prediction (its lease ended while it waited
    behind a slow disk) is a censored sample of at least its time: the next hit of that tier
    is priced at the slow disk, not at the tier's prior."""
    import time
    st = _state("r", 1.0, 8193)
    lp = _planning([st])
    st.tiers = [L2] * 512
    before = lp.planner.load_ms([L2] * 512, UNIT_BYTES)
    st.plan_pred = before                                   # what plan() predicted
    lp.load_started(st, 0, 512)
    tier, nbytes, _, predicted, step, ahead = st.load_info
    st.load_info = (tier, nbytes, time.monotonic() - 60.0, predicted, step, ahead)  # ran 60 s
    lp.load_ended(st, failed=True)
    assert lp.planner.queued(L2) == 0
    after = lp.planner.load_ms([L2] * 512, UNIT_BYTES)
    assert after > 10 * before and after > 10_000          # 1 GiB now costs seconds
    # A failure within its prediction, or of an in-step load (its time is its step's), says
    # nothing about the tier's speed.
    st2 = _state("r2", 2.0, 8193)
    lp2 = _planning([st2])
    st2.tiers, st2.plan_pred = [L2] * 512, before
    lp2.load_started(st2, 0, 512)
    lp2.load_ended(st2, failed=True)
    st2.sync = True
    lp2.load_started(st2, 0, 512)
    tier, nbytes, _, predicted, step, ahead = st2.load_info
    assert step                                              # in the next step
    st2.load_info = (tier, nbytes, time.monotonic() - 60.0, predicted, step, ahead)
    lp2.load_ended(st2, failed=True)
    assert lp2.planner.load_ms([L2] * 512, UNIT_BYTES) == pytest.approx(before)


def test_a_host_engine_prices_a_load_behind_its_compute_queue():
    """A host-memory engine copies inside its own steps: a load does not run beside the
    compute queued in front of the request, so a busy CPU engine waits for both."""
    clock = Clock()
    gpu = planner(clock)
    host = LoadPlanner(gpu.prefill, gpu.tiers, overlaps_compute=False)
    feed_steps(gpu, clock, slowdown=2.2)
    for _ in range(8):   # a 0.5 GB/s disk
        gpu.tiers.add(L3, 256 * UNIT_BYTES, 256 * UNIT_BYTES / 0.5e6 + 5)
    units = 8192 // UNIT
    backlog = gpu.prefill.queue_ms(16 * 8192, 16 * gpu.prefill.work(8192, 0))
    beside = gpu.plan([L3] * units, 0, UNIT, 8193, UNIT_BYTES, in_step_ok=True,
                      backlog_ms=backlog)
    assert beside.kind == "async"                   # the load hides behind the queue
    behind = host.plan([L3] * units, 0, UNIT, 8193, UNIT_BYTES, in_step_ok=True,
                       backlog_ms=backlog)
    assert behind.kind == "recompute"               # the queue hides nothing
    assert behind.recompute_ms == pytest.approx(beside.recompute_ms)


def test_steps_lengthened_by_in_step_copies_do_not_let_more_copies_in():
    """The in-step rule weighs a copy against the batch's compute (the steps that loaded
    nothing in the step), not against steps that waited for earlier in-step copies: those
    grow with every copy let in, and judged against them a replica of a round-robin node
    let ever longer stalls through (bench/results/h200x4-2026-11-28-node/NOTES.md)."""
    clock = Clock()
    p = planner(clock)
    feed_steps(p, clock, slowdown=2.2)
    for _ in range(8):
        p.tiers.add(L1, 512 * UNIT_BYTES, 512 * UNIT_BYTES / 50e6)
    for _ in range(40):   # a busy batch: 16 requests, 60 ms of compute a step
        step = next_step(p)
        p.prefill.step_built(step, [(256, 4096)] * 16, clean=True)
        clock.t += 0.06
        p.prefill.step_done(step)
    for _ in range(40):   # then steps stalled by in-step copies: 300 ms each
        step = next_step(p)
        p.prefill.step_built(step, [(256, 4096)] * 16, clean=False)
        clock.t += 0.3
        p.prefill.step_done(step)
    p.batch_requests = 16
    assert p.prefill.step_ms > 250 and p.prefill.compute_step_ms() == pytest.approx(60, rel=0.05)
    units = 65536 // UNIT         # 8 GiB at 50 GB/s: ~170 ms, inside 300 ms but not 60 ms
    plan = p.plan([L1] * units, 0, UNIT, 65537, UNIT_BYTES, in_step_ok=True)
    assert plan.kind == "async"
    units = 8192 // UNIT          # 1 GiB: ~21 ms, inside the batch's compute: in the step
    plan = p.plan([L1] * units, 0, UNIT, 8193, UNIT_BYTES, in_step_ok=True)
    assert plan.kind == "in_step"
