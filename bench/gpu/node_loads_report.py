"""node_loads.py's pure logic (no torch, no GPU, no daemon): the device list, the L1 size,
the step plan every process follows, and the summary of the processes' records: per-device
GB/s against each device's own ceilings, the aggregate, the daemon's CPU use and the
PASS/FAIL verdicts. tests/integration/python/test_node_loads_bench.py tests it.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

TARGET = 0.85  # issue 41: every device loading at once >= 85% of its own ceiling.
BLOCK_TOKENS = 16
GIB = 1 << 30


@dataclass(frozen=True)
class Step:
    """One step of the plan. Every process waits on the node's barrier before and after it
    (the parent samples the daemon's CPU there); the devices named act in between.
    phase: ceil_alone / ceil_all (torch 1 GiB pinned -> GPU copies, median of 5 after a
    warm-up, inside the one step) or load_alone / load_all (one load job of `blocks` blocks
    per device); rep < 0 is a warm-up load, not timed."""
    phase: str
    devices: Tuple[int, ...]
    blocks: int = 0
    rep: int = 0

    @property
    def timed_load(self) -> bool:
        return self.phase.startswith("load") and self.rep >= 0


def parse_devices(text: Optional[str], count: int) -> List[int]:
    """The CUDA devices to use: "all" / None (every one of `count`) or "0,2,3". ValueError,
    with the reason, for none, an unknown index or one named twice."""
    if count <= 0:
        raise ValueError("no CUDA device")
    if text is None or text.strip() in ("", "all"):
        return list(range(count))
    try:
        devices = [int(d) for d in text.split(",")]
    except ValueError:
        raise ValueError(f"--devices {text!r}: expected 'all' or indices like 0,1,2") from None
    bad = [d for d in devices if not 0 <= d < count]
    if bad:
        raise ValueError(f"--devices {text!r}: no CUDA device {bad} (this machine has {count}: "
                         f"0..{count - 1})")
    if len(set(devices)) != len(devices):
        raise ValueError(f"--devices {text!r}: a device named twice")
    return devices


def parse_sizes(text: str) -> List[int]:
    """Tokens per load ("8192,32768") as blocks of 16 tokens; ValueError unless each is a
    positive multiple of 16."""
    try:
        tokens = [int(t) for t in text.split(",")]
    except ValueError:
        raise ValueError(f"--sizes {text!r}: expected token counts like 8192,32768") from None
    bad = [t for t in tokens if t <= 0 or t % BLOCK_TOKENS]
    if bad:
        raise ValueError(f"--sizes {text!r}: {bad} not a positive multiple of {BLOCK_TOKENS} tokens")
    return [t // BLOCK_TOKENS for t in tokens]


def l1_capacity(devices: int, blocks_per_device: int, block_bytes: int) -> str:
    """The started daemon's L1: every device's stored blocks plus a quarter, and 1 GiB more
    (slabs, rounding), in whole GiB."""
    need = devices * blocks_per_device * block_bytes
    return f"{math.ceil((need * 1.25 + GIB) / GIB)}GiB"


def make_plan(devices: Sequence[int], sizes_blocks: Sequence[int], repeats: int,
              warmup: int) -> List[Step]:
    """Ceilings alone (one device after the other), all at once; loads of each device alone,
    then of all at once, per size: `warmup` untimed then `repeats` timed. With one device
    there is no all-at-once step."""
    devs = tuple(devices)
    plan = [Step("ceil_alone", (d,)) for d in devs]
    if len(devs) > 1:
        plan.append(Step("ceil_all", devs))
    for d in devs:
        plan += [Step("load_alone", (d,), n, r) for n in sizes_blocks for r in range(-warmup, repeats)]
    if len(devs) > 1:
        plan += [Step("load_all", devs, n, r) for n in sizes_blocks for r in range(-warmup, repeats)]
    return plan


# ---------------------------------------------------------------------- summary


def _p99(xs: List[float]) -> float:
    """Nearest-rank 99th percentile (the max for fewer than 100 samples)."""
    s = sorted(xs)
    return s[min(len(s) - 1, math.ceil(0.99 * len(s)) - 1)]


def _pct(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return None if a is None or not b else 100.0 * a / b


def _loads(records: List[Dict[str, Any]], phase: str, blocks: int,
           block_bytes: int) -> Optional[Dict[str, Any]]:
    jobs = [r["job_s"] for r in records if r["phase"] == phase and r.get("blocks") == blocks
            and r.get("rep", 0) >= 0 and "job_s" in r]
    if not jobs:
        return None
    subs = [r["submit_s"] for r in records if r["phase"] == phase and r.get("blocks") == blocks
            and r.get("rep", 0) >= 0 and "submit_s" in r]
    med = statistics.median(jobs)
    return {"repeats": len(jobs), "job_ms_p50": med * 1e3, "job_ms_p99": _p99(jobs) * 1e3,
            "submit_us_p50": statistics.median(subs) * 1e6 if subs else None,
            "gbps": blocks * block_bytes / med / 1e9}


def _ceiling(records: List[Dict[str, Any]], phase: str) -> Optional[float]:
    return next((r["gbps"] for r in records if r["phase"] == phase), None)


def _cpu(windows: List[Dict[str, Any]], phase: str, blocks: int, nbytes: int) -> Optional[Dict[str, float]]:
    """The daemon's CPU over the windows of one phase and size (the parent's barrier-to-
    barrier brackets): cores used and ms per GB loaded."""
    ws = [w for w in windows if w["phase"] == phase and w["blocks"] == blocks]
    wall, cpu = sum(w["wall_s"] for w in ws), sum(w["cpu_s"] for w in ws)
    if not ws or wall <= 0:
        return None
    return {"cpu_s": cpu, "wall_s": wall, "cores": cpu / wall,
            "cpu_ms_per_gb": cpu * 1e3 / (nbytes * len(ws) / 1e9)}


def summarize(devices: Sequence[int], sizes_blocks: Sequence[int], block_bytes: int,
              workers: Dict[int, Dict[str, Any]], windows: List[Dict[str, Any]],
              target: float = TARGET) -> Dict[str, Any]:
    """The report from each device's worker result ({"records": [...], "gpu": ...} or
    {"error": ...}) and the parent's CPU windows. Per device and size: load GB/s (bytes /
    median job time) alone and all at once, each against the device's ceiling measured the
    same way (alone / all at once) and the all-at-once load against the alone ceiling too.
    The target applies to like with like: load_all >= target x ceiling_all (with one device:
    load_alone >= target x ceiling_alone)."""
    multi = len(devices) > 1
    out: Dict[str, Any] = {"target_pct": 100 * target, "devices": [], "aggregate": [],
                           "daemon_cpu": [], "errors": {}, "wrong_bytes": 0, "checked_bytes": 0}
    checks: List[bool] = []
    for d in devices:
        w = workers.get(d, {"error": "no result from its process"})
        if "error" in w:
            out["errors"][str(d)] = w["error"]
        recs = w.get("records", [])
        wrong = sum(r.get("wrong_bytes", 0) for r in recs)
        checked = sum(r.get("checked_bytes", 0) for r in recs)
        out["wrong_bytes"] += wrong
        out["checked_bytes"] += checked
        dev = {"device": d, "gpu": w.get("gpu"), "ceiling_alone_gbps": _ceiling(recs, "ceil_alone"),
               "ceiling_all_gbps": _ceiling(recs, "ceil_all"), "wrong_bytes": wrong,
               "checked_bytes": checked, "sizes": []}
        for n in sizes_blocks:
            alone, both = _loads(recs, "load_alone", n, block_bytes), _loads(recs, "load_all", n, block_bytes)
            row: Dict[str, Any] = {"tokens": n * BLOCK_TOKENS, "blocks": n, "bytes": n * block_bytes,
                                   "alone": alone, "all": both}
            row["alone_pct_ceiling_alone"] = _pct(alone and alone["gbps"], dev["ceiling_alone_gbps"])
            row["all_pct_ceiling_all"] = _pct(both and both["gbps"], dev["ceiling_all_gbps"])
            row["all_pct_ceiling_alone"] = _pct(both and both["gbps"], dev["ceiling_alone_gbps"])
            key = "all_pct_ceiling_all" if multi else "alone_pct_ceiling_alone"
            row["check"] = None if row[key] is None else row[key] >= 100 * target
            checks.append(bool(row["check"]))
            dev["sizes"].append(row)
        out["devices"].append(dev)
    for n in sizes_blocks:
        nbytes = n * block_bytes
        out["daemon_cpu"].append({"phase": "load_alone", "tokens": n * BLOCK_TOKENS,
                                  **(_cpu(windows, "load_alone", n, nbytes) or {})})
        if multi:
            agg = _aggregate(workers, devices, n, nbytes)
            if agg:
                out["aggregate"].append(agg)
            out["daemon_cpu"].append({"phase": "load_all", "tokens": n * BLOCK_TOKENS,
                                      **(_cpu(windows, "load_all", n, nbytes * len(devices)) or {})})
    ceil_alone = [d["ceiling_alone_gbps"] for d in out["devices"]]
    ceil_all = [d["ceiling_all_gbps"] for d in out["devices"]]
    out["ceiling_alone_sum_gbps"] = sum(ceil_alone) if None not in ceil_alone else None
    out["ceiling_all_sum_gbps"] = sum(ceil_all) if multi and None not in ceil_all else None
    out["pass"] = bool(checks) and all(checks) and not out["errors"] and out["wrong_bytes"] == 0 \
        and out["checked_bytes"] > 0
    return out


def _aggregate(workers: Dict[int, Dict[str, Any]], devices: Sequence[int], blocks: int,
               nbytes: int) -> Optional[Dict[str, Any]]:
    """All devices at once, per repeat: every device's bytes over the span from the first
    submit to the last completion (time.monotonic in each process: CLOCK_MONOTONIC, one
    clock for the node); the median of the repeats."""
    by_rep: Dict[int, List[Tuple[float, float]]] = {}
    for d in devices:
        for r in workers.get(d, {}).get("records", []):
            if r["phase"] == "load_all" and r.get("blocks") == blocks and r.get("rep", 0) >= 0 \
                    and "start" in r:
                by_rep.setdefault(r["rep"], []).append((r["start"], r["end"]))
    spans = [max(e for _, e in v) - min(s for s, _ in v) for v in by_rep.values()
             if len(v) == len(devices)]
    if not spans:
        return None
    span = statistics.median(spans)
    return {"tokens": blocks * BLOCK_TOKENS, "repeats": len(spans), "span_ms_p50": span * 1e3,
            "gbps": len(devices) * nbytes / span / 1e9}


def _f(x: Optional[float], fmt: str = "{:.1f}") -> str:
    return "-" if x is None else fmt.format(x)


def format_summary(result: Dict[str, Any]) -> str:
    """The table node_loads.py prints and writes to summary.txt."""
    s = result["summary"]
    lines = [f"kvstrata node loads: {len(s['devices'])} device(s), one kvstratad, layout nhd16 "
             f"(Llama-3.1-8B, 2 MiB blocks); GB/s = bytes / median job time "
             f"(submit to completion); target: all at once >= {s['target_pct']:.0f}% of the "
             f"device's all-at-once ceiling (one device: alone vs alone)",
             f"{'dev':<4}{'gpu':<24}{'ceil alone':>11}{'ceil all':>9}{'tokens':>8}{'load alone':>11}"
             f"{'%ceil':>7}{'load all':>9}{'%ceil all':>10}{'%ceil alone':>12}{'job ms all':>11}  check"]
    for d in s["devices"]:
        for i, row in enumerate(d["sizes"]):
            head = (f"{d['device']:<4}{(d['gpu'] or '?')[:23]:<24}{_f(d['ceiling_alone_gbps']):>11}"
                    f"{_f(d['ceiling_all_gbps']):>9}" if i == 0 else " " * 48)
            alone, both = row["alone"] or {}, row["all"] or {}
            verdict = {True: "PASS", False: "FAIL", None: "-"}[row["check"]]
            lines.append(f"{head}{row['tokens']:>8}{_f(alone.get('gbps')):>11}"
                         f"{_f(row['alone_pct_ceiling_alone'], '{:.0f}%'):>7}{_f(both.get('gbps')):>9}"
                         f"{_f(row['all_pct_ceiling_all'], '{:.0f}%'):>10}"
                         f"{_f(row['all_pct_ceiling_alone'], '{:.0f}%'):>12}"
                         f"{_f(both.get('job_ms_p50'), '{:.2f}'):>11}  {verdict}")
    if s["ceiling_all_sum_gbps"] is not None:
        lines.append(f"ceilings summed: {s['ceiling_alone_sum_gbps']:.1f} GB/s one device at a "
                     f"time, {s['ceiling_all_sum_gbps']:.1f} GB/s all at once (a shared host/PCIe "
                     f"side shows as the second below the first)")
    for a in s["aggregate"]:
        lines.append(f"all at once, {a['tokens']} tokens: {a['gbps']:.1f} GB/s over the node "
                     f"(first submit to last completion, median {a['span_ms_p50']:.2f} ms of "
                     f"{a['repeats']} repeats)")
    for c in s["daemon_cpu"]:
        if "cores" in c:
            lines.append(f"daemon CPU, {c['phase']} {c['tokens']} tokens: {c['cores']:.2f} cores "
                         f"({c['cpu_s']:.3f} s over {c['wall_s']:.3f} s of loads), "
                         f"{c['cpu_ms_per_gb']:.2f} ms per GB loaded")
    run = result.get("daemon_cpu_run")
    if run:
        lines.append(f"daemon CPU over the whole run: {run['cpu_s']:.2f} s in {run['wall_s']:.1f} s")
    lines.append(f"bytes checked: {s['checked_bytes'] / GIB:.2f} GiB, wrong: {s['wrong_bytes']}")
    for d, err in s["errors"].items():
        lines.append(f"device {d}: ERROR {err}")
    if result.get("error"):
        lines.append(f"ERROR {result['error']}")
    lines.append(f"RESULT: {'PASS' if s['pass'] and not result.get('error') else 'FAIL'}")
    return "\n".join(lines)
