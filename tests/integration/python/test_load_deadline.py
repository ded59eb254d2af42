"""The deadline rule of a planned load (kvstrata.planning.load_deadline): with k units
landed a load gives up at D(k) = max(P_0 - P_k, min(overdue(L), R - P_K)) -- where stopping
costs no more than recomputing at once would have, never before twice its own prediction
plus 50 ms, never past the time at which even the whole load landing could no longer beat
recomputing. Pure: a planner with a linear compute, no daemon."""
from __future__ import annotations

from kvstrata import Tier
from kvstrata.planning import (GiveUp, LoadPlanner, PrefillModel, TierSpeeds, give_up_schedule,
                               overdue, overdue_ms, prefill_flops)

L1, L2 = int(Tier.L1), int(Tier.L2)
UNIT = 16
MS_PER_TOKEN = 1.0


def linear_planner() -> LoadPlanner:
    prefill = PrefillModel(prefill_flops(None), 1e15, chunk_tokens=8192)
    prefill.predict_ms = lambda tokens, context: max(1, tokens) * MS_PER_TOKEN
    return LoadPlanner(prefill, TierSpeeds())


def schedule(p: LoadPlanner, tiers, num_tokens: int, unit_bytes: int = 1 << 20,
             backlog_ms: float = 0.0):
    plan = p.plan(tiers, 0, UNIT, num_tokens, unit_bytes, in_step_ok=False,
                  backlog_ms=backlog_ms)
    return plan, give_up_schedule(p.prefill, plan, tiers, 0, UNIT, num_tokens)


def test_overdue_is_twice_the_prediction_plus_50_ms():
    assert overdue_ms(10.0) == 70.0 and overdue_ms(-5.0) == 50.0
    assert overdue(70.1, 10.0) and not overdue(70.0, 10.0)


def test_nothing_landed_waits_for_the_floor_then_more_as_units_land():
    p = linear_planner()
    # 32 units of 1 MiB in L2 (prior 1 GB/s: ~35 ms) against 513 tokens (~513 ms).
    plan, g = schedule(p, [L2] * 32, 513)
    assert plan.units == 32 and plan.kind == "async"
    recompute = plan.recompute_ms
    assert recompute == 513.0
    floor = overdue_ms(plan.load_ms)
    assert g.deadline_ms(0) == floor                 # R - P_0 = 0: the floor rules
    # With k units landed, stopping costs (P_0 - P_k) + P_k = P_0: D(k) = the k units'
    # compute.
    for k, d in g.points:
        assert d == max(k * UNIT * MS_PER_TOKEN, floor), (k, d)
    assert [k for k, _ in g.points] == sorted({k for k, _ in g.points})
    assert all(a[1] <= b[1] for a, b in zip(g.points, g.points[1:]))
    # Never past R - P_K (the whole load landing then only matches recomputing), <= R.
    assert max(d for _, d in g.points) <= recompute - 1 * MS_PER_TOKEN


def test_the_deadline_steps_by_the_units_landed():
    g = GiveUp(((0, 50.0), (4, 80.0), (8, 120.0)))
    assert [g.deadline_ms(k) for k in (0, 3, 4, 7, 8, 100)] == [50.0, 50.0, 80.0, 80.0,
                                                              120.0, 120.0]
    assert g.shifted(10.0).points == ((0, 40.0), (4, 70.0), (8, 110.0))


def test_the_leading_l1_units_land_at_once():
    """The points start at the first unit below L1: the L1 units before it land at once."""
    p = linear_planner()
    tiers = [L1] * 8 + [L2] * 24
    plan, g = schedule(p, tiers, 513)
    assert plan.units == 32
    ks = [k for k, _ in g.points]
    assert ks[0] == 0 and ks[1] == 8 and ks[-1] < 32
    assert g.deadline_ms(8) == max(8 * UNIT * MS_PER_TOKEN, overdue_ms(plan.load_ms))


def test_a_floor_never_past_what_the_whole_load_could_win():
    """A load predicted close to its break-even: twice its prediction would pass R - P_K;
    the floor stops there (a planner whose prior was wrong never waits longer than
    recomputing would take)."""
    p = linear_planner()
    # 200 MiB over 1 GB/s is ~210 ms against 257 tokens (257 ms): loaded, barely.
    plan, g = schedule(p, [L2] * 16, 257, unit_bytes=13 << 20)
    assert plan.units == 16, plan
    assert overdue_ms(plan.load_ms) > plan.recompute_ms - 1.0
    assert g.deadline_ms(0) == plan.recompute_ms - 1.0 <= plan.recompute_ms


def test_a_compute_queue_in_front_is_not_waited_for():
    """A request behind 300 ms of other requests' prefill: the engine schedules the requests
    behind it while it waits for its load, so waiting is not free -- the deadline is the
    same as on an idle engine (only its cap, the whole load's break-even, counts the
    queue)."""
    p = linear_planner()
    plan, g = schedule(p, [L2] * 32, 513, backlog_ms=300.0)
    idle_plan, idle = schedule(p, [L2] * 32, 513)
    assert plan.recompute_ms == 813.0 and plan.units == 32
    assert g.deadline_ms(0) == overdue_ms(plan.load_ms) < 300.0
    assert g.points == idle.points


def test_a_recompute_plan_has_no_deadline():
    p = linear_planner()
    p.tiers.add(L2, 64 << 20, 600_000.0)   # a stalled L2, measured
    plan, g = schedule(p, [L2] * 32, 513)
    assert plan.units == 0 and g is None
