"""TierSpeeds: how long bringing bytes up from each of the daemon's tiers takes, measured.

A sample is one transfer as it happened: a load's job time as the daemon reports it (its
elapsed_us: submit to completion, the promotions from L2/L3 it waited for included), or a
promotion the scheduler watched land in L1 (promotion_watch). Bytes count every namespace
the transfer served (all tensor-parallel ranks and KV cache groups), as the planner asks.
A tier's cost is `latency + bytes * ms_per_byte`: ms_per_byte is the samples' time over
their bytes (each sample's latency taken off), weighted by recency (a sample's weight
halves every HALF_LIFE_S) and blended with the tier's prior, which counts as PRIOR_BYTES
of transfer: a tier that slows down is priced by its slow samples within seconds, and one
not measured for a while drifts back to its prior.

A transfer still running past its prediction is a censored sample (`add(..., key=...)`: at
least this long), replaced by its real time when it ends: a stalled mount is priced out
while its first load is still stuck, not after.

The priors are conservative for the tiers below L1 (a slow disk) and for L1 a PCIe link
(tensor-parallel ranks copy in parallel: their bytes scale the prior).
Thread-safe (the engine's threads and promotion_watch's add samples).
"""
from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

from ..tier import Tier

HALF_LIFE_S = 5.0
HORIZON_S = 60.0              # samples older than this are dropped
PRIOR_BYTES = 64 << 20
MAX_SAMPLES = 64              # per tier


@dataclass(frozen=True)
class TierPrior:
    latency_ms: float
    gb_per_s: float


# L1: one PCIe Gen5 link's worth of host-to-GPU copies (per rank); L2: a local disk;
# L3: a shared filesystem. Measurements replace these within a few transfers.
PRIORS: Dict[int, TierPrior] = {
    int(Tier.L1): TierPrior(0.5, 20.0),
    int(Tier.L2): TierPrior(2.0, 1.0),
    int(Tier.L3): TierPrior(5.0, 0.5),
}


@dataclass
class _Sample:
    at: float
    nbytes: int
    ms: float
    key: Optional[str]


class TierSpeeds:
    def __init__(self, ranks: int = 1, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._priors = {t: TierPrior(p.latency_ms, p.gb_per_s * (ranks if
                                                                   t == int(Tier.L1)
                                                                   else 1))
                        for t, p in PRIORS.items()}
        self._samples: Dict[int, List[_Sample]] = {t: [] for t in self._priors}

    def add(self, tier: int, nbytes: int, ms: float, key: Optional[str] = None) -> None:
        """One transfer of `nbytes` from `tier` took `ms`. A sample with the `key` of an
        earlier one replaces it (a censored sample, then the transfer's real time)."""
        if tier not in self._samples or nbytes <= 0 or not math.isfinite(ms) or ms < 0:
            return
        now = self._clock()
        with self._lock:
            samples = self._samples[tier]
            if key is not None:
                samples[:] = [s for s in samples if s.key != key]
            samples.append(_Sample(now, int(nbytes), float(ms), key))
            cutoff = now - HORIZON_S
            samples[:] = [s for s in samples if s.at >= cutoff][-MAX_SAMPLES:]

    def cost(self, tier: int) -> Tuple[float, float]:
        """(latency ms, ms per byte) of the tier now."""
        prior = self._priors.get(tier)
        if prior is None:
            return 0.0, 0.0
        per_byte0 = 1.0 / (prior.gb_per_s * 1e6)  # ms per byte
        now = self._clock()
        weight0 = float(PRIOR_BYTES)
        num, den = per_byte0 * weight0, weight0
        with self._lock:
            samples = list(self._samples[tier])
        for s in samples:
            if s.at < now - HORIZON_S:
                continue
            w = 0.5 ** ((now - s.at) / HALF_LIFE_S)
            num += w * max(0.0, s.ms - prior.latency_ms)
            den += w * s.nbytes
        return prior.latency_ms, num / den

    def predict_ms(self, tier: int, nbytes: int) -> float:
        latency, per_byte = self.cost(tier)
        return latency + nbytes * per_byte if nbytes > 0 else 0.0

    def gb_per_s(self, tier: int) -> float:
        """The tier's current bandwidth estimate (for stats and traces)."""
        _, per_byte = self.cost(tier)
        return 1.0 / (per_byte * 1e6) if per_byte > 0 else float("inf")
