"""Each replica's queue over a routing mode, sampled while the load runs, and the per-replica
lines of summary.txt built from it: which replica fell behind, and whether it was short of
GPU KV (requests waiting at a full cache) or slow with room to spare.

A `Sampler` (a context manager around the load) scrapes every replica's /metrics on one
background thread every `period_s` and keeps, per replica, rows of
[seconds since the start] + GAUGES in their order: vLLM 0.26's gauges
`vllm:num_requests_running`, `vllm:num_requests_waiting`, `vllm:kv_cache_usage_perc` and its
counter `vllm:num_preemptions` (vllm/v1/metrics/loggers.py), and KVStrataConnector's counters
(`vllm:kvstrata_*`, absent for other roles: 0): its in-step and asynchronous plans, and the
units it planned to store against those stored, dropped or failed -- the difference is the
store backlog, whose GPU blocks stay allocated until the daemon's copy ends. A scrape that
fails leaves no row. The thread
only reads; stopping it waits for the scrape in progress (bounded by its timeout).
"""
from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from typing import Any, Dict, List, Optional

from metrics import samples
from stats import percentile

GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
          "vllm:kvstrata_plan_in_step", "vllm:kvstrata_plan_async", "vllm:num_preemptions",
          "vllm:kvstrata_store_units_planned", "vllm:kvstrata_stored_units",
          "vllm:kvstrata_store_dropped_units", "vllm:kvstrata_store_failed_units")
# A row's columns: 0 the time, then GAUGES from 1.
RUNNING, WAITING, KV_USAGE, PLAN_IN_STEP, PLAN_ASYNC, PREEMPTIONS, STORE_PLANNED, STORED, \
    STORE_DROPPED, STORE_FAILED = range(1, len(GAUGES) + 1)


def _col(row: List[float], i: int) -> float:
    """Column i of a row, 0.0 for a row recorded with fewer columns."""
    return row[i] if i < len(row) else 0.0


def store_backlog(row: List[float]) -> float:
    """Units the connector planned to store and the daemon has not yet stored, dropped or
    failed at that sample (their GPU blocks are still held)."""
    return _col(row, STORE_PLANNED) - _col(row, STORED) - _col(row, STORE_DROPPED) \
        - _col(row, STORE_FAILED)


def read_gauges(text: str) -> List[float]:
    """The GAUGES of a Prometheus text page, in that order, each summed over its label sets
    (`_total` accepted for the counters); 0.0 where absent."""
    got: Dict[str, float] = {}
    for name, v in samples(text):
        key = name[:-6] if name.endswith("_total") else name
        if key in GAUGES:
            got[key] = got.get(key, 0.0) + v
    return [got.get(g, 0.0) for g in GAUGES]


class Sampler:
    """Samples every replica's GAUGES every period_s on one daemon thread between __enter__
    and __exit__; `series` (replica index -> rows) is complete after __exit__."""

    def __init__(self, urls: List[str], period_s: float = 0.5, timeout_s: float = 2.0) -> None:
        self.urls = list(urls)
        self.period_s = period_s
        self.timeout_s = timeout_s
        self.series: Dict[int, List[List[float]]] = {i: [] for i in range(len(urls))}
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._t0 = 0.0

    def _scrape(self, i: int) -> None:
        try:
            with urllib.request.urlopen(f"{self.urls[i]}/metrics", timeout=self.timeout_s) as r:
                row = read_gauges(r.read().decode(errors="replace"))
        except (urllib.error.URLError, OSError):
            return
        self.series[i].append([round(time.perf_counter() - self._t0, 3)] + row)

    def _loop(self) -> None:
        while not self._stop.is_set():
            began = time.perf_counter()
            for i in range(len(self.urls)):
                self._scrape(i)
            self._stop.wait(max(0.0, self.period_s - (time.perf_counter() - began)))

    def __enter__(self) -> "Sampler":
        self._t0 = time.perf_counter()
        self._thread = threading.Thread(target=self._loop, name="node-gauges", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


def replica_lines(results: Dict[str, Any]) -> List[str]:
    """summary.txt's per-replica view of every mode that has samples: each replica's TTFT
    p90 of turns >= 2, when its last request ended, and over the samples its most requests
    running and waiting, the seconds with requests waiting, its mean GPU KV usage, its
    preemptions, and its largest store backlog (units whose GPU blocks wait for a store)."""
    lines: List[str] = []
    for key, res in results.items():
        series = res.get("gauges") or {}
        if not any(series.values()):
            continue
        lines.append(f"  {key}")
        for rep, rows in sorted(series.items(), key=lambda kv: int(kv[0])):
            mine = [r for r in res["requests"] if r.get("replica") == int(rep)]
            ttft = [r["ttft_s"] * 1e3 for r in mine
                    if r.get("turn", 1) >= 2 and r.get("ttft_s") is not None]
            p90 = percentile(ttft, 90)
            end = max((r["end_s"] for r in mine), default=0.0)
            waiting_s = sum(b[0] - a[0] for a, b in zip(rows, rows[1:]) if a[WAITING] > 0)
            usage = sum(r[KV_USAGE] for r in rows) / len(rows) if rows else 0.0
            preempted = _col(rows[-1], PREEMPTIONS) - _col(rows[0], PREEMPTIONS) if rows else 0
            backlog = max((store_backlog(r) for r in rows), default=0.0)
            lines.append(
                f"    replica {rep}: TTFT t>=2 p90 {'-' if p90 is None else f'{p90:.0f}'} ms, "
                f"last end {end:.1f} s; "
                f"running max {max((r[RUNNING] for r in rows), default=0):.0f}, "
                f"waiting max {max((r[WAITING] for r in rows), default=0):.0f} "
                f"({waiting_s:.1f} s with some waiting), GPU KV used {usage:.0%} on average, "
                f"{preempted:.0f} preempted, store backlog max {backlog:.0f} units")
    if lines:
        lines = ["", "Per replica, sampled every 0.5 s while the mode ran (gauges.py): a replica "
                 "that falls behind shows here"] + lines
    return lines
