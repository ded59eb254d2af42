"""LoadPlanner: per request, how much of a KVStrata hit to load, and how -- never slower than
recomputing it.

For a hit of units u0..u1 (each in some tier) after `first` tokens the engine already holds, the
predicted time to the first token of loading the leading k units and computing the rest is

    load_ms(k) + prefill_ms(tokens left | context first + k units)

where load_ms is the slowest tier's latency plus each tier's bytes at its measured speed
(TierSpeeds) plus what this engine already has in flight from that tier (the queue in front
of it), and prefill_ms is the engine's own measured compute (PrefillModel). Loading nothing
(k = 0) is recomputing. Both ways the request also waits for the compute queued in front of
it on a busy engine (`backlog_ms`: the prefill still to run of the requests ahead): a
recompute runs after it, a load runs beside it (the copy engines, not the SMs), so the
prediction is `max(load_ms(k), backlog) + prefill_ms(rest)` against `backlog +
prefill_ms(all)`. Where loads do not run beside the compute (`overlaps_compute` False: a
host-memory engine, vLLM's CPU build, copies inside its own step) a load waits for the queue
too: `backlog + load_ms(k) + prefill_ms(rest)`. The planner takes the k with the smallest
prediction, among the
ends of the hit's runs of one tier (the cost is concave between them: loading is linear in
k, computing the rest shrinks faster than linearly), and loads only when that beats
recomputing by MARGIN of the compute (both ways pay one step's overhead at least). A
hybrid model's hit is all or nothing (a shorter hit would need other sliding-window units
than the lookup checked).

How a chosen L1 load runs: in the step that uses it, layer by layer (the lowest time to
first token), unless that would stall a busy batch -- the copy of layer i runs while the
step computes the layers before it, so the batch waits only for what the copy takes beyond
the step's own time, and every request of the batch waits for it; loading asynchronously
(before the request is scheduled, while the batch runs) costs this request about one step
instead. In-step when `max(0, load_ms - step) * requests in the last step <= step` (step: the
engine's recent time of a step that loaded nothing in the step, PrefillModel.compute_step_ms --
not of every step: steps that waited for in-step copies are longer by the wait, and judged
against them the rule lets more stalls through the longer they make the steps -- the likely
cause, not yet measured, of one replica falling behind on four H200s under round-robin routing:
its in-flight requests grew from 8 to 16 and its TTFT from ~100 to 1,500 ms while the others
stayed near 100 ms, bench/results/h200x4-2026-11-28-node/NOTES.md). On the node bench (two
H200s, 16 requests per GPU, steps of ~100 ms, loads of ~15 ms) every load in the step beat every
load asynchronous: 15.7 against 16.7 s, later turns' TTFT p50 666 against 831 ms
(bench/results/h200x2-2026-11-27-node/NOTES.md).

Decisions (Plan.kind): "in_step", "async", "partial" (the leading part loads
asynchronously or in-step; the engine computes the rest), "recompute". Not thread-safe:
one thread calls it (vLLM's scheduler; kvstrata_sglang holds a lock). Engine-independent:
kvstrata_vllm and kvstrata_sglang both use it (docs/load-planner.md).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Tuple

from ..tier import Tier

from .prefill_model import PrefillModel
from .tier_speeds import TierSpeeds

MARGIN = 0.05   # a load must beat recomputing by 5 % of the recompute's compute time


@dataclass(frozen=True)
class Plan:
    units: int            # leading units of the hit to load (0: recompute)
    in_step: bool         # the load runs in the step that uses it
    kind: str             # "in_step", "async", "partial", "recompute"
    load_ms: float        # predicted load time of `units`
    ttft_ms: float        # predicted time to the first token: the plan's
    recompute_ms: float   # predicted time to the first token recomputing all of it
    backlog_ms: float = 0.0  # of both: the wait for the compute queued in front of it


class LoadPlanner:
    def __init__(self, prefill: PrefillModel, tiers: TierSpeeds,
                 overlaps_compute: bool = True) -> None:
        """overlaps_compute: a load runs beside the engine's compute (a GPU engine's copy
        engines); False where the engine copies inside its own steps (host memory)."""
        self.prefill = prefill
        self.tiers = tiers
        self.overlaps_compute = overlaps_compute
        self.batch_requests = 0     # requests in the last step the engine scheduled
        self._queued: Dict[int, int] = {}  # tier -> bytes this engine is loading from it

    def queued(self, tier: int) -> int:
        """The bytes this engine is loading from `tier` now (the queue a new load joins)."""
        return self._queued.get(tier, 0)

    def queue(self, tier: int, nbytes: int) -> None:
        """A load of nbytes from `tier` started (negative: it ended)."""
        self._queued[tier] = max(0, self._queued.get(tier, 0) + nbytes)

    def set_queue(self, tier_bytes: Dict[int, int]) -> None:
        """The bytes this engine has still to load from each tier, counted by the caller."""
        self._queued = {t: max(0, int(n)) for t, n in tier_bytes.items()}

    def load_ms(self, tiers: List[int], unit_bytes: int) -> float:
        """Predicted time to load units in these tiers (one transfer)."""
        if not tiers:
            return 0.0
        # Counted in C (a 32K-token hit has 2,048 units; this runs in the engine's step).
        per_tier: Dict[int, int] = {t: tiers.count(t) * unit_bytes for t in set(tiers)}
        total, latency = 0.0, 0.0
        for t, nbytes in per_tier.items():
            lat, per_byte = self.tiers.cost(t)
            latency = max(latency, lat)
            total += (nbytes + self._queued.get(t, 0)) * per_byte
        return latency + total

    def plan(self, tiers: List[int], first: int, unit_tokens: int, num_tokens: int,
             unit_bytes: int, in_step_ok: bool, partial_ok: bool = True,
             backlog_ms: float = 0.0) -> Plan:
        """tiers: the tier of each unit of the hit, in order, the first starting at token
        `first` (the engine's own hit); num_tokens: the request's; unit_bytes: a unit's bytes over
        every namespace it loads into; in_step_ok: the mode, engine and tiers allow an
        in-step load of a leading part that is all L1; backlog_ms: the engine's compute
        queued in front of this request (PrefillModel.queue_ms)."""
        end = num_tokens - 1  # the engine computes at least the last token
        wait = max(0.0, backlog_ms)
        compute = self.prefill.predict_ms(end - first + 1, first)
        recompute = wait + compute
        # Both ways run a step at least: the margin is of the compute, not of its overhead.
        margin = MARGIN * max(0.0, compute - self.prefill.overhead_ms)
        best: Tuple[float, int, float] = (recompute - margin, 0, 0.0)
        cuts = [k for k in range(1, len(tiers) + 1)
                if k == len(tiers) or tiers[k] != tiers[k - 1]] if partial_ok else [len(tiers)]
        for k in cuts:
            loaded = min(first + k * unit_tokens, end)
            load = self.load_ms(tiers[:k], unit_bytes)
            start = max(load, wait) if self.overlaps_compute else load + wait
            ttft = start + self.prefill.predict_ms(end - loaded + 1, loaded)
            if ttft < best[0]:
                best = (ttft, k, load)
        ttft, k, load = best
        if k == 0:
            return Plan(0, False, "recompute", 0.0, recompute, recompute, wait)
        l1_only = tiers[:k].count(int(Tier.L1)) == k
        in_step = in_step_ok and l1_only and self._in_step_pays(load)
        if k < len(tiers):
            kind = "partial"
        else:
            kind = "in_step" if in_step else "async"
        return Plan(k, in_step, kind, load, ttft, recompute, wait)

    def _in_step_pays(self, load_ms: float) -> bool:
        others = self.batch_requests
        step = self.prefill.compute_step_ms()
        return others == 0 or max(0.0, load_ms - step) * others <= step

