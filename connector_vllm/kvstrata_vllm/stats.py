"""Connector stats (vLLM's KVConnectorStats: logged and exported) and Prometheus counters.

Counters (all sums over the interval and over the workers):
  lookup_tokens / hit_tokens       tokens asked beyond vLLM's local hit / found in KVStrata
  lookup_unavailable               lookups answered "miss" because the daemon was unreachable
  lookup_fast                      lookups answered on the daemon's lookup fast path (one per
                                   rank's namespace; the others went over gRPC)
  lookup_reused                    vLLM's repeated asks for a waiting request answered from
                                   its last lookup (under a second old, lease still held)
  store_units_planned              units the scheduler handed to the workers to store
  stored_units / store_dropped_units / store_failed_units / stored_bytes
  loaded_units / load_failed_units / loaded_bytes
  plan_in_step / plan_async / plan_partial / plan_recompute
                                   the load planner's decisions, one per hit it priced
  plan_unloaded_tokens             hit tokens the planner left to compute
  load_gave_up / load_gave_up_tokens
                                   planned loads that gave up at their deadline (a tier
                                   slower than predicted) / the hit tokens they left to compute
  load_gave_up_units               units those loads left to compute, over the ranks
The scheduler also sends the plan_* and load_gave_up* totals with its session's heartbeats:
kvstratad sums them over its sessions (`kvstrata stats`, docs/load-planner.md).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Dict

try:
    from vllm.distributed.kv_transfer.kv_connector.v1.metrics import (KVConnectorPromMetrics,
                                                                      KVConnectorStats)
except ImportError:  # pragma: no cover
    KVConnectorStats = object  # type: ignore[assignment,misc]
    KVConnectorPromMetrics = object  # type: ignore[assignment,misc]

COUNTERS = {
    "lookup_tokens": "Prompt tokens looked up in KVStrata beyond vLLM's local prefix hit",
    "hit_tokens": "Tokens found in KVStrata (external prefix-cache hits)",
    "lookup_unavailable": "Lookups answered as misses because kvstratad was unreachable",
    "lookup_fast": "Lookups answered on kvstratad's lookup fast path (not gRPC)",
    "lookup_reused": "Repeated asks for a waiting request answered from its last lookup",
    "store_units_planned": "Units handed to the workers to store",
    "stored_units": "Units stored into KVStrata",
    "store_dropped_units": "Units not stored: daemon backpressure, queue full or unreachable",
    "store_failed_units": "Units whose store failed",
    "stored_bytes": "Bytes stored into KVStrata",
    "loaded_units": "Units loaded from KVStrata",
    "load_failed_units": "Units that failed to load (vLLM recomputes their blocks)",
    "loaded_bytes": "Bytes loaded from KVStrata",
    "plan_in_step": "Hits the load planner loads in the step that uses them (layer by layer)",
    "plan_async": "Hits the load planner loads before the request is scheduled",
    "plan_partial": "Hits the load planner loads in part (the engine computes the rest)",
    "plan_recompute": "Hits the load planner recomputes (loading would be slower)",
    "plan_unloaded_tokens": "Hit tokens the load planner left to compute",
    "load_gave_up": "Planned loads that gave up at their deadline (a tier slower than "
                    "predicted; the engine computed the rest)",
    "load_gave_up_tokens": "Hit tokens the loads that gave up left to compute",
    "load_gave_up_units": "Units the loads that gave up left to compute (over the ranks)",
}


# The scheduler's counters sent with its heartbeats (`kvstrata stats`).
PLANNER_COUNTERS = ("plan_in_step", "plan_async", "plan_partial", "plan_recompute",
                    "plan_unloaded_tokens", "load_gave_up", "load_gave_up_tokens")


class StatsCounter:
    """Thread-safe counters taken as a KVStrataStats each interval; the planner's also kept
    as running totals (planner_totals: the heartbeats' counters, `kvstrata stats`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._data: Dict[str, int] = {}
        self._planner: Dict[str, int] = dict.fromkeys(PLANNER_COUNTERS, 0)

    def add(self, name: str, value: int) -> None:
        if value:
            with self._lock:
                self._data[name] = self._data.get(name, 0) + int(value)
                if name in self._planner:
                    self._planner[name] += int(value)

    def planner_totals(self) -> Dict[str, int]:
        """The load planner's counters since the start (never reset)."""
        with self._lock:
            return dict(self._planner)

    def take(self) -> "KVStrataStats | None":
        with self._lock:
            data, self._data = self._data, {}
        return KVStrataStats(data=data) if data else None


@dataclass
class KVStrataStats(KVConnectorStats):  # type: ignore[misc]
    data: Dict[str, Any] = field(default_factory=dict)

    def reset(self) -> None:
        self.data = {}

    def aggregate(self, other: Any) -> "KVStrataStats":
        for key, value in (other.data or {}).items():
            self.data[key] = self.data.get(key, 0) + value
        return self

    def reduce(self) -> Dict[str, int | float]:
        out: Dict[str, int | float] = dict(self.data)
        asked = self.data.get("lookup_tokens", 0)
        if asked:
            out["hit_rate"] = round(self.data.get("hit_tokens", 0) / asked, 4)
        return out

    def is_empty(self) -> bool:
        return not any(self.data.values())


class KVStrataPromMetrics(KVConnectorPromMetrics):  # type: ignore[misc]
    """vllm:kvstrata_<counter>_total per engine, fed from the stats above."""

    def __init__(self, vllm_config: Any, metric_types: Any, labelnames: Any,
                 per_engine_labelvalues: Dict[int, Any]) -> None:
        super().__init__(vllm_config, metric_types, labelnames, per_engine_labelvalues)
        self._counters: Dict[tuple, Any] = {}
        self._defs = {name: self._counter_cls(name=f"vllm:kvstrata_{name}",
                                              documentation=doc, labelnames=labelnames)
                      for name, doc in COUNTERS.items()}

    def observe(self, transfer_stats_data: Dict[str, Any], engine_idx: int = 0) -> None:
        for name, value in (transfer_stats_data or {}).items():
            metric = self._defs.get(name)
            if metric is None or not value:
                continue
            key = (engine_idx, name)
            if key not in self._counters:
                self._counters[key] = metric.labels(*self.per_engine_labelvalues[engine_idx])
            self._counters[key].inc(value)
