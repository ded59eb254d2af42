"""The per-step host profile of the single-request rows (summary.txt's last sections), from
the connector's trace (kvstrata_vllm.trace: KVStrataConnector and the noop control roles)
and engine.py's CPU probe (cpu_probe.py), for every engine process of the run (a role and
its .N repeats in other processes).

For each row (role, prompt size; the offload-tier hit and vLLM's own GPU prefix hit), over
its repeats: the median of the forward step's host time (step_start -> step_save), of the
host time per layer (the hooks event's median gap) and what the engine's main thread did
in the layers (cpu_ms on a CPU, runq_ms runnable but waiting for one, voluntary and
involuntary switches), the µs spent inside the connector's own hooks (worker and
scheduler) and the pickled metadata's bytes.
"""
from __future__ import annotations

import statistics
from typing import Any, Dict, List, Optional

import cpu_probe

ORDER = ("none", "native", "noop", "noop_link", "noop_reg", "kvstrata", "kvstrata_async",
         "kvstrata_batch")


def role_keys(results: Dict[str, Any]) -> List[str]:
    """The result keys with single-request rows, in ORDER (a role's .N repeats after it)."""
    keys = [k for k, v in results.items() if isinstance(v, dict)
            and v.get("phases", {}).get("single")]

    def rank(k: str) -> tuple:
        base, _, n = k.partition(".")
        return (ORDER.index(base) if base in ORDER else len(ORDER), base, int(n or 1))
    return sorted(keys, key=rank)


def forward_step(tl: List[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """The request's forward step in a timeline: the first hooks event, with the step_start
    and step_save before it, the step_finished after it, the sched event and lookup of the
    request (None without a hooks event: no trace, or no per-layer hooks)."""
    for i, e in enumerate(tl):
        if e["ev"] != "hooks":
            continue
        before = tl[:i]
        start = next((x for x in reversed(before) if x["ev"] == "step_start"), None)
        save = next((x for x in reversed(before) if x["ev"] == "step_save"), None)
        done = next((x for x in tl[i:] if x["ev"] == "step_finished"), None)
        scheds = [x for x in before if x["ev"] == "sched"]
        lookup = next((x for x in before if x["ev"] == "lookup"), None)
        return {"hooks": e, "start": start, "save": save, "done": done,
                "sched": scheds[-1] if scheds else None, "lookup": lookup}
    return None


def med(values: List[Optional[float]]) -> Optional[float]:
    vals = [v for v in values if v is not None]
    return round(statistics.median(vals), 3) if vals else None


def step_profile(timelines: List[List[Dict[str, Any]]]) -> Optional[Dict[str, Any]]:
    steps = [s for s in (forward_step(tl) for tl in timelines) if s is not None]
    if not steps:
        return None

    def span(s: Dict[str, Any], a: str, b: str) -> Optional[float]:
        return s[b]["at_ms"] - s[a]["at_ms"] if s[a] and s[b] else None

    out: Dict[str, Any] = {"steps": len(steps),
                           "fwd_ms": med([span(s, "start", "save") for s in steps]),
                           "layer_ms": med([s["hooks"]["median_ms"] for s in steps]),
                           "layers_ms": med([s["hooks"]["total_ms"] for s in steps])}
    for k in ("cpu_ms", "runq_ms", "vcs", "ivcs"):
        out[k] = med([s["hooks"].get(k) for s in steps])
    out["cpus"] = sorted({c for s in steps for c in s["hooks"].get("cpus", []) if c is not None})
    hooks: Dict[str, List[float]] = {}
    for s in steps:
        for src in ("done", "sched"):
            for name, us in ((s[src] or {}).get("us") or {}).items():
                hooks.setdefault(name, []).append(us)
    out["hook_us"] = {k: med(v) for k, v in hooks.items()}
    out["meta_bytes"] = med([(s["sched"] or {}).get("meta_bytes") for s in steps])
    # A large load's metadata is not pickled by the trace: its units instead (trace.py).
    out["meta_units"] = med([(s["sched"] or {}).get("meta_units") for s in steps])
    out["lookup_ms"] = med([(s["lookup"] or {}).get("ms") for s in steps])
    return out


def spread(values: List[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"


def render_profile(results: Dict[str, Any]) -> List[str]:
    keys = role_keys(results)
    if not keys:
        return []
    lines = ["", "Engine processes: TTFT median (min-max) over the repeats, ms; GPU prefix hit "
             "(3 runs)", f"  {'process':14} {'tokens':>6} {'hit':>22} {'GPU hit':>22}"]
    for k in keys:
        for n, row in results[k]["phases"]["single"].items():
            lines.append(f"  {k:14} {n:>6} {spread(row.get('runs_ms', [])):>22} "
                         f"{spread(row.get('gpu_hit_runs_ms') or [row.get('gpu_hit_ms') or 0]):>22}")
    lines += ["", "The request's forward step, medians over the repeats (trace): fwd = "
              "step_start->step_save ms; layer = host ms per layer; main thread over the layers: "
              "cpu / runq ms, voluntary / involuntary switches; us inside the connector's hooks"]
    for k in keys:
        for n, row in results[k]["phases"]["single"].items():
            for what, tls in (("hit", row.get("timelines")),
                              ("GPU hit", row.get("gpu_hit_timelines") or
                               [row.get("gpu_hit_timeline") or []])):
                p = step_profile(tls or [])
                if p is None:
                    continue
                us = ", ".join(f"{h} {v}" for h, v in sorted(p["hook_us"].items()))
                lines.append(
                    f"  {k:14} {n:>6} {what:7} fwd {p['fwd_ms']} layer {p['layer_ms']} "
                    f"(layers {p['layers_ms']}) cpu {p['cpu_ms']} runq {p['runq_ms']} "
                    f"vcs {p['vcs']} ivcs {p['ivcs']} cpus {p['cpus']} | lookup "
                    f"{p['lookup_ms']} meta " + (f"{p['meta_bytes']} B" if p['meta_units'] is None
                                                 else f"{p['meta_units']} units") +
                    f" | us: {us}")
    lines += ["", "CPU by thread over the repeats (cpu_probe.py; ms per request: on a CPU / "
              "waiting for one)"]
    for k in keys:
        for n, row in results[k]["phases"]["single"].items():
            for what in ("cpu_hit", "cpu_gpu_hit"):
                if row.get(what):
                    lines.append(f"  {k} {n} {what[4:]}: " + "\n    ".join(
                        cpu_probe.lines(row[what])))
    return lines
