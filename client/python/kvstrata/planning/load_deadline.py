"""GiveUp: when a load that runs late stops waiting, so that a tier slower than predicted
never makes a request slower than recomputing it would have.

A plan (LoadPlanner.plan) loads the leading K units of a hit and computes the rest. Let P_k
be the predicted compute left once the first k units have landed (P_0 recomputes the whole
hit, P_K is what the plan computes), R the plan's recompute time (the compute queued in
front of the request plus P_0) and L its predicted load time. A load stopped at time t
after it started, with k units landed, has its landed units kept and the rest computed:
t + P_k, against P_0 for having recomputed at once. So a load with k units landed gives up at

    D(k) = max(P_0 - P_k, min(overdue(L), R - P_K))

- P_0 - P_k, the compute of the k landed units, grows with every unit that lands: a tier
  slower than predicted that still lands units faster than the engine would compute them
  keeps going; one that lands them more slowly (or not at all: a stalled mount) is cut
  where stopping costs no more than recomputing at once would have.
- The compute queued in front of the request is not waited for as if it were free: an
  engine schedules the requests behind one that waits for its load (vLLM skips a request
  in WAITING_FOR_REMOTE_KVS), so they take its place in that queue while it waits.
- The floor: a load always gets `overdue` of its own prediction (twice it plus
  OVERDUE_SLACK_MS, the same "well past its prediction" that makes a running load a
  censored sample of its tier), but never past R - P_K, where even the whole load landing
  could no longer beat recomputing. So D(k) <= R - P_K <= R: a load never waits longer than
  recomputing would take, whatever the tiers' measurements (none yet included); given up
  on the floor, the first token comes at most min(overdue(L), R - P_K) later than
  recomputing at once would have brought it.

Nothing here is measured: the rule needs the plan and the prefill model only, so it holds
for a planner that has measured nothing yet. Pure; thread-safe.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from ..tier import Tier

from .load_planner import Plan
from .prefill_model import PrefillModel

OVERDUE_FACTOR = 2.0      # a transfer running past twice its prediction ...
OVERDUE_SLACK_MS = 50.0   # ... plus this is well past it
POINTS = 16               # deadlines sent per load (k = the units landed)


def overdue(ms: float, predicted_ms: float) -> bool:
    """Whether a transfer predicted at `predicted_ms` that has run (or ran) `ms` is well
    past its prediction: a censored sample of at least `ms` for its bytes."""
    return ms > overdue_ms(predicted_ms)


def overdue_ms(predicted_ms: float) -> float:
    """The time past which a transfer predicted at `predicted_ms` is well past it."""
    return OVERDUE_FACTOR * max(0.0, predicted_ms) + OVERDUE_SLACK_MS


@dataclass(frozen=True)
class GiveUp:
    """A load's deadlines: `points` are (units landed, ms since the load started), the units
    ascending, the ms non-decreasing; with k units landed the load gives up at the ms of the
    last point whose units <= k (a conservative step: D(k) grows with k)."""
    points: Tuple[Tuple[int, float], ...]

    def deadline_ms(self, landed: int) -> float:
        i = bisect.bisect_right([k for k, _ in self.points], landed) - 1
        return self.points[max(0, i)][1]

    def shifted(self, ms: float) -> "GiveUp":
        """The same deadlines counted from `ms` later (time already spent)."""
        return GiveUp(tuple((k, d - ms) for k, d in self.points))


def give_up_schedule(prefill: PrefillModel, plan: Plan, tiers: Sequence[int], first: int,
                     unit_tokens: int, num_tokens: int,
                     points: int = POINTS) -> Optional[GiveUp]:
    """The deadlines of `plan` (LoadPlanner.plan's answer for `tiers` after `first` tokens,
    a request of `num_tokens`): D(k) at up to `points` unit counts, from the first unit
    below L1 to the last of the plan (the L1 units before it land at once). None for a plan
    that loads nothing."""
    k_all = plan.units
    if k_all <= 0:
        return None
    end = num_tokens - 1   # the engine computes at least the last token

    def compute_left(k: int) -> float:
        loaded = min(first + k * unit_tokens, end)
        return prefill.predict_ms(end - loaded + 1, loaded)

    compute = compute_left(0)
    floor = min(overdue_ms(plan.load_ms), plan.recompute_ms - compute_left(k_all))
    lower = next((k for k, t in enumerate(tiers[:k_all]) if int(t) != int(Tier.L1)), k_all)
    ks: List[int] = [0]
    span = max(1, k_all - lower)
    for i in range(max(1, points - 1)):
        k = lower + (i * span) // max(1, points - 1)
        if k < k_all and k > ks[-1]:
            ks.append(k)
    out, last = [], float("-inf")
    for k in ks:
        d = max(compute - compute_left(k), floor, last)
        out.append((k, d))
        last = d
    return GiveUp(tuple(out))
