"""The figures engine.py reports from its timed runs: percentiles of TTFTs and one row per
prompt size (every run's wall time, the median, what the server cached, the outputs)."""
from __future__ import annotations

import statistics
from typing import Any, Dict, List, Optional


def pct(sorted_values: List[float], p: int) -> Optional[float]:
    if not sorted_values:
        return None
    i = min(len(sorted_values) - 1, max(0, round(p / 100 * (len(sorted_values) - 1))))
    return round(sorted_values[i] * 1e3, 1)


def summarize(cold: Optional[Dict[str, Any]], runs: List[Dict[str, Any]]) -> Dict[str, Any]:
    ms = [r["wall_s"] * 1e3 for r in runs]
    row = {"runs_ms": [round(x, 2) for x in ms], "median_ms": round(statistics.median(ms), 2),
           "cached": [r["requests"][0]["cached"] for r in runs],
           "tokens": [r["requests"][0]["tokens"] for r in runs],
           "top5": [r["requests"][0]["top5"] for r in runs],
           "timeline": runs[-1]["timeline"], "timelines": [r["timeline"] for r in runs]}
    if cold is not None:
        row["cold_ms"] = round(cold["wall_s"] * 1e3, 2)
        row["cold_tokens"] = cold["requests"][0]["tokens"]
        row["cold_top5"] = cold["requests"][0]["top5"]
    return row
