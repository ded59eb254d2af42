"""The load planner's engine-independent parts: never load a hit slower than recomputing it.

- LoadPlanner (load_planner.py): how many leading units of a hit to load, priced per tier
  against the engine's prefill.
- PrefillModel, prefill_flops (prefill_model.py): the engine's compute, from the model's
  arithmetic, fitted to the steps an engine reports.
- TierSpeeds (tier_speeds.py): each tier's measured speed, from the caller's timed loads.
- PromotionWatch (promotion_watch.py): times the promotions a leased lookup starts.
- GiveUp, give_up_schedule, overdue (load_deadline.py): when a load that runs late stops
  waiting (never past the request's recompute time).

The connectors wire them to their engine: kvstrata_vllm's scheduler, kvstrata_sglang's
HiCache backend (docs/load-planner.md). Pure Python: no engine, torch or numpy import.
"""
from __future__ import annotations

from .load_deadline import (OVERDUE_SLACK_MS, GiveUp, give_up_schedule, overdue,
                            overdue_ms)
from .load_planner import MARGIN, LoadPlanner, Plan
from .prefill_model import CPU_FLOPS, GPU_FLOPS, PrefillFlops, PrefillModel, prefill_flops
from .promotion_watch import PromotionWatch
from .tier_speeds import HALF_LIFE_S, PRIORS, TierPrior, TierSpeeds

__all__ = ["CPU_FLOPS", "GPU_FLOPS", "GiveUp", "HALF_LIFE_S", "LoadPlanner", "MARGIN",
           "OVERDUE_SLACK_MS", "PRIORS", "Plan", "PrefillFlops", "PrefillModel",
           "PromotionWatch", "TierPrior", "TierSpeeds", "give_up_schedule", "overdue",
           "overdue_ms", "prefill_flops"]
