#!/usr/bin/env python3
"""Regenerates every plot of bench/README.md from the raw output committed under bench/results/.

    .venv/bin/python bench/plots/make_plots.py              # writes bench/plots/*.png
    .venv/bin/python bench/plots/make_plots.py --out DIR    # somewhere else (the test does)
    .venv/bin/python bench/plots/make_plots.py --list       # the PNG names it makes, one a line

Reads only committed files (.json, .json.gz, .json.xz, summary.txt); needs matplotlib (Agg).
The output is deterministic for one matplotlib build: fixed size and dpi, no timestamp or
software name in the PNG metadata. Each plot names its run and hardware in its title; the
figures and their baselines are quoted in bench/README.md.
"""
from __future__ import annotations

import argparse
import gzip
import json
import lzma
import math
import re
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)

HERE = Path(__file__).resolve().parent
RESULTS = HERE.parent / "results"
DPI = 100
# One colour per role in every plot.
COLOURS = {
    "recompute": "#7f7f7f", "native": "#1f77b4", "L1": "#d62728", "L2": "#ff7f0e",
    "cross": "#9467bd", "GPU hit": "#2ca02c", "file": "#1f77b4", "baseline": "#7f7f7f",
    "KVStrata": "#d62728", "KVStrata write": "#ff9896", "fio": "#1f77b4", "LMCache": "#8c564b",
}


def load_json(path: Path) -> Any:
    """A committed JSON file, plain or compressed (.gz, .xz)."""
    opener: Callable[..., Any] = open
    if path.suffix == ".gz":
        opener = gzip.open
    elif path.suffix == ".xz":
        opener = lzma.open
    with opener(path, "rt") as f:
        return json.load(f)


def nearest_rank(values: Sequence[float], p: float) -> float:
    """The p-th percentile by nearest rank (bench/slow_disk/summary.py and bench/node use it)."""
    s = sorted(values)
    return s[min(len(s), max(1, math.ceil(p / 100 * len(s)))) - 1]


def upper_median(values: Sequence[float]) -> float:
    """The median of the rounds as bench/tiers/l2_fio prints it (the upper one of an even count)."""
    s = sorted(values)
    return s[len(s) // 2]


def save(fig: Any, out: Path, name: str) -> str:
    fig.tight_layout()
    fig.savefig(out / name, dpi=DPI, metadata={"Software": None})
    plt.close(fig)
    return name


def label_axes(ax: Any, ylabel: str, ymax: float, title: str) -> None:
    """A bar plot's y label and range, title, two-column legend on top and grid."""
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, ymax)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, ncol=2, loc="upper center")
    ax.grid(True, axis="y", alpha=0.3)


def bars(ax: Any, groups: Sequence[str], series: Sequence[Tuple[str, Sequence[Optional[float]], str]],
         fmt: str = "{:.0f}", width: float = 0.8) -> None:
    """Grouped bars, one series per (label, values, colour); a None value leaves a gap."""
    n = len(series)
    w = width / n
    for i, (label, values, colour) in enumerate(series):
        xs = [g + (i - (n - 1) / 2) * w for g in range(len(groups))]
        pts = [(x, v) for x, v in zip(xs, values) if v is not None]
        if not pts:
            continue
        rects = ax.bar([p[0] for p in pts], [p[1] for p in pts], w, label=label, color=colour)
        for r, (_, v) in zip(rects, pts):
            ax.annotate(fmt.format(v), (r.get_x() + r.get_width() / 2, r.get_height()),
                        ha="center", va="bottom", fontsize=6, rotation=90, xytext=(0, 2),
                        textcoords="offset points")
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups, fontsize=8)
    ax.margins(y=0.12)


def ttft_rows(path: Path) -> Dict[int, Dict[str, Any]]:
    """bench/vllm_gpu's report: {tokens: ttft row + the cross-instance ms}."""
    report = load_json(path)["report"]
    rows = {r["tokens"]: dict(r) for r in report["ttft"]}
    for tokens, c in (report.get("cross_instance") or {}).items():
        rows.setdefault(int(tokens), {})["cross_ms"] = c.get("ms")
    return rows


ROLE_KEYS = [("recompute", "recompute_ms"), ("native", "native_hit_ms"), ("L1", "kvstrata_l1_hit_ms"),
             ("L2", "kvstrata_l2_hit_ms"), ("cross", "cross_ms"), ("GPU hit", "gpu_cache_hit_ms")]
ROLE_LABELS = {"recompute": "recompute (no connector)", "native": "vLLM native CPU offload hit",
               "L1": "KVStrata L1 hit", "L2": "KVStrata L2 hit (daemon restarted)",
               "cross": "KVStrata cross-instance (engine B)", "GPU hit": "GPU prefix hit (KVStrata's engine)"}


def ttft_lines(ax: Any, rows: Dict[int, Dict[str, Any]], roles: Sequence[str], style: str = "-o",
               suffix: str = "") -> None:
    sizes = sorted(rows)
    for role, key in ROLE_KEYS:
        if role not in roles:
            continue
        pts = [(t, rows[t].get(key)) for t in sizes if rows[t].get(key) is not None]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], style, color=COLOURS[role],
                    label=ROLE_LABELS[role] + suffix, markersize=4)


def log_axes(ax: Any, xlabel: str = "prompt tokens", ylabel: str = "TTFT, ms") -> None:
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)


def plot_gpu_ttft(out: Path) -> str:
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 5), sharey=True)
    run21 = ttft_rows(RESULTS / "h100-2026-11-24-vllm026-run21/vllm_gpu.json.gz")
    ttft_lines(a, run21, ["recompute", "native", "L1", "L2", "cross", "GPU hit"])
    a.set_title("vLLM 0.26, Llama-3.1-8B geometry, H100: run 21 (2026-11-24)\n"
                "every role, one run; engine B read from L2 here", fontsize=9)
    log_axes(a)
    a.legend(fontsize=7)
    p1 = ttft_rows(RESULTS / "vllm-gpu-2026-11-27-planner-run1/vllm_gpu.json")
    p3 = ttft_rows(RESULTS / "vllm-gpu-2026-11-27-planner-run3/vllm_gpu.json")
    ttft_lines(b, p1, ["recompute", "native", "L1", "cross"], suffix=" (run 1)")
    ttft_lines(b, p3, ["recompute", "L2"], style="--s", suffix=" (run 3, eager, planner)")
    b.set_title("the same, 2026-11-27 load-planner runs (H100): run 1 (CUDA graphs)\n"
                "and run 3 (eager): an L2 hit on a 1.1-1.75 GB/s disk is recomputed", fontsize=9)
    log_axes(b)
    b.legend(fontsize=7)
    return save(fig, out, "gpu_ttft_vs_prompt.png")


def mla_summary_row(path: Path) -> Dict[str, Optional[float]]:
    """The single-request table of a summary.txt (the MLA run left no vllm_gpu.json)."""
    text = path.read_text()
    m = re.search(r"^\s*8192\s+([\d.]+)\s+(\S+)\s+([\d.]+)\s+([\d.]+)\s+.*?\s([\d.]+)\s+-\s+-\s*$", text, re.M)
    if not m:
        raise ValueError(f"{path}: no 8192-token row")
    cross = re.search(r"8192: \d+/\d+ tokens hit, ([\d.]+) ms", text)

    def num(s: str) -> Optional[float]:
        return None if s == "-" else float(s)

    return {"recompute_ms": num(m.group(1)), "native_hit_ms": num(m.group(2)),
            "kvstrata_l1_hit_ms": num(m.group(3)), "kvstrata_l2_hit_ms": num(m.group(4)),
            "gpu_cache_hit_ms": num(m.group(5)), "cross_ms": float(cross.group(1)) if cross else None}


def plot_gpu_models(out: Path) -> str:
    runs = [("Gemma 3 (6 groups)", RESULTS / "vllm-gpu-2026-11-27-gemma3-hybrid-run2/vllm_gpu.json"),
            ("gpt-oss (2 groups)", RESULTS / "vllm-gpu-2026-11-28-gpt-oss-run2/vllm_gpu.json.xz"),
            ("Llama fp8 KV", RESULTS / "vllm-gpu-2026-11-28-fp8/vllm_gpu.json.xz")]
    groups: List[str] = []
    rows: List[Dict[str, Any]] = []
    for name, path in runs:
        for tokens, row in sorted(ttft_rows(path).items()):
            groups.append(f"{name}\n{tokens // 1024}K")
            rows.append(row)
    groups.append("DeepSeek-V2-Lite MLA\nTP=2 (2x H200), 8K")
    rows.append(mla_summary_row(RESULTS / "vllm-gpu-2026-11-27-mla-tp2/summary.txt"))
    fig, ax = plt.subplots(figsize=(13, 5))
    series = [(ROLE_LABELS[role], [r.get(key) for r in rows], COLOURS[role]) for role, key in ROLE_KEYS]
    bars(ax, groups, series, fmt="{:.1f}")
    ax.set_yscale("log")
    ax.set_ylabel("TTFT, ms (median of 3)")
    ax.set_title("Hybrid, MLA and fp8 geometries in real vLLM 0.26 (issue 42), one H200 unless said, eager, "
                 "dummy weights; native not run for MLA", fontsize=9)
    ax.legend(fontsize=7, ncol=3)
    ax.grid(True, axis="y", which="both", alpha=0.3)
    return save(fig, out, "gpu_ttft_models.png")


NODE4 = "h200x4-2026-11-28-node"


def node_summaries(run: str, results: str = NODE4) -> Dict[str, Dict[str, Any]]:
    data = load_json(RESULTS / results / run / "node.json.gz")
    return {mode: r["summary"] for mode, r in data["results"].items() if r.get("summary")}


def plot_node(out: Path) -> str:
    runs = [("run 1", node_summaries("1-rr-sticky-lmcache")), ("run 4", node_summaries("4-sticky-rr-rerun")),
            ("run 6", node_summaries("6-rr3-sticky-new-instep"))]
    groups: List[str] = []
    rows: List[Dict[str, Any]] = []
    for run, summaries in runs:
        for mode in sorted(summaries):
            groups.append(f"{mode}\n{run}")
            rows.append(summaries[mode])
    colours = ["#d62728" if g.startswith("kvstrata:") else "#2ca02c" if g.startswith("lmcache")
               else "#1f77b4" if g.startswith("native") else "#7f7f7f" for g in groups]
    fig, (a, b) = plt.subplots(2, 1, figsize=(18, 8), sharex=True)
    xs = range(len(groups))
    a.bar(xs, [r["prompt_tok_per_s"] / 1e3 for r in rows], color=colours)
    for x, r in zip(xs, rows):
        a.annotate(f"{r['prompt_tok_per_s'] / 1e3:.0f}K", (x, r["prompt_tok_per_s"] / 1e3), ha="center",
                   va="bottom", fontsize=7)
    a.set_ylabel("prompt tokens/s (thousands)")
    a.set_title("Node: four H200s, one `vllm serve` per GPU behind a router, one kvstratad (2026-11-28, runs 1, 4, 6); "
                "64 conversations x 6 turns, 8 per GPU; every run of each mode", fontsize=9)
    p90 = [r["ttft_later_ms"]["p90"] for r in rows]
    b.bar(xs, p90, color=colours)
    for x, v in zip(xs, p90):
        b.annotate(f"{v:.0f}", (x, v), ha="center", va="bottom", fontsize=7)
    b.set_ylabel("TTFT p90 of turns >= 2, ms")
    b.set_xticks(list(xs))
    b.set_xticklabels(groups, fontsize=7, rotation=30, ha="right")
    for ax in (a, b):
        ax.grid(True, axis="y", alpha=0.3)
    return save(fig, out, "node_throughput_ttft.png")


def plot_node_loads(out: Path) -> str:
    summary = load_json(RESULTS / NODE4 / "2-node-loads/node_loads.json")["summary"]
    groups: List[str] = []
    alone: List[float] = []
    both: List[float] = []
    ceil_alone: List[float] = []
    ceil_all: List[float] = []
    for dev in summary["devices"]:
        for s in dev["sizes"]:
            groups.append(f"GPU {dev['device']}, {s['tokens'] // 1024}K")
            alone.append(s["alone"]["gbps"])
            both.append(s["all"]["gbps"])
            ceil_alone.append(dev["ceiling_alone_gbps"])
            ceil_all.append(dev["ceiling_all_gbps"])
    fig, ax = plt.subplots(figsize=(12, 4.5))
    bars(ax, groups, [("pinned copy ceiling, device alone", ceil_alone, "#c7c7c7"),
                      ("KVStrata load, device alone", alone, "#ff9896"),
                      ("pinned copy ceiling, all at once", ceil_all, "#7f7f7f"),
                      ("KVStrata load, all at once", both, "#d62728")], fmt="{:.1f}")
    label_axes(ax, "GB/s (one load job, median of 5)", 75,
               "Every GPU loading at once: one kvstratad, four H200s (2026-11-28, node run 2)")
    return save(fig, out, "node_loads_vs_ceiling.png")


def plot_engine_jobs(out: Path) -> str:
    data = load_json(RESULTS / "gpu-2026-11-26-sixteenth/call14_final_engine_jobs.json")
    layouts = list(data["layouts"])
    pct = {(r["layout"], r["op"], r["tokens"]): r["pct_ceiling"] for r in data["rows"]}
    fig, (a, b) = plt.subplots(1, 2, figsize=(13, 4.8), sharey=True)
    for ax, op, target, ceiling in ((a, "load", 90, "h2d_1GiB_gbps"), (b, "store", 85, "d2h_1GiB_gbps")):
        bars(ax, layouts, [(f"{t // 1024}K tokens", [pct.get((lay, op, t)) for lay in layouts], c)
                           for t, c in ((1024, "#c7c7c7"), (8192, "#d62728"), (32768, "#7f7f7f"))],
             fmt="{:.0f}")
        ax.axhline(target, color="black", linestyle="--", linewidth=1, label=f"target at 8K: {target} %")
        ax.set_title(f"one {op} job, % of the PCIe ceiling ({data['ceilings'][ceiling]:.1f} GB/s, same run)",
                     fontsize=9)
        ax.set_ylim(0, 110)
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    a.set_ylabel("% of the pinned-copy ceiling (job p50)")
    fig.suptitle("Engine jobs per KV layout, H200, 20 repeats (2026-11-26, sixteenth session, call 14)", fontsize=10)
    return save(fig, out, "engine_jobs_pcie.png")


def l2_fio_figures(path: Path) -> Dict[str, float]:
    rounds = load_json(path)["rounds"]
    return {k: upper_median([r[k]["gbps"] for r in rounds]) for k in
            ("fio_read", "tier_read", "fio_write", "tier_write", "fio_uring_read")}


def plot_l2_fio(out: Path) -> str:
    cases = [("H200 host's disk (2026-11-27)", "h200-2026-11-27-l2-fio/l2_fio_{}k.json", ("2048", "256", "64")),
             ("CPU VM's disk, run 2 (2026-11-27)", "cpu-2026-11-27-l2-fio/run2-d4-{}.json", ("2mib", "256kib", "64kib"))]
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    for ax, (title, pattern, sizes) in zip(axes, cases):
        figs = [l2_fio_figures(RESULTS / pattern.format(s)) for s in sizes]
        bars(ax, ["2 MiB", "256 KiB", "64 KiB"],
             [("fio psync x4 read", [f["fio_read"] for f in figs], "#1f77b4"),
              ("KVStrata L2 read (FileTier, 4 threads)", [f["tier_read"] for f in figs], "#d62728"),
              ("fio psync x4 write", [f["fio_write"] for f in figs], "#aec7e8"),
              ("KVStrata L2 write", [f["tier_write"] for f in figs], "#ff9896")], fmt="{:.2f}")
        ax.set_title(f"L2 beside fio, O_DIRECT, one file per block: {title}", fontsize=9)
        ax.set_xlabel("block size")
        ax.set_ylabel("GB/s (median of rounds)")
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=7)
    return save(fig, out, "l2_vs_fio.png")


def plot_l3(out: Path) -> str:
    runs = [load_json(RESULTS / f"gluster-2026-11-25-final/files_sharing_two_in_flight_{i}.json") for i in (1, 2, 3)]
    groups = [f"run {i}" for i in (1, 2, 3)]
    fig, ax = plt.subplots(figsize=(9, 4.8))
    bars(ax, groups, [("baseline write (daemon's syscalls, 4 threads)", [r["files"]["write_per_s"] for r in runs], "#aec7e8"),
                      ("KVStrata L3 write", [r["l3_write"]["files_per_s"] for r in runs], "#ff9896"),
                      ("baseline read (other mount, cold)", [r["files"]["read_per_s"] for r in runs], "#1f77b4"),
                      ("KVStrata L3 read (two requests in flight)", [r["l3_read"]["files_per_s"] for r in runs], "#d62728")])
    label_axes(ax, "68 KiB block files per second", 1.4 * max(r["files"]["read_per_s"] for r in runs),
               "L3 on GlusterFS 10.3 (two FUSE mounts, 2-vCPU VM) against the raw store (2026-11-25)")
    return save(fig, out, "l3_vs_files.png")


def plot_l3_cap(out: Path) -> str:
    data = load_json(RESULTS / "gluster-2026-11-27-cap-runs/cap_runs.json")
    fig, ax = plt.subplots(figsize=(8, 4.2))
    for writers, colour in (("2", "#1f77b4"), ("4", "#d62728")):
        peaks = [r["peak_x"] for r in data["runs"][writers]]
        ax.plot(range(1, len(peaks) + 1), peaks, "-o", color=colour, markersize=4,
                label=f"{writers} daemons ({[2.08, 4.15][writers == '4']}x the cap offered)")
    ax.axhline(data["limit"], color="black", linestyle="--", linewidth=1, label=f"target {data['limit']}x")
    ax.set_ylim(0.9, 1.1)
    ax.set_xlabel("run")
    ax.set_ylabel("peak L3 bytes / cap")
    ax.set_title("The shared L3 cap over 20 runs on GlusterFS (2026-11-27)", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(True, alpha=0.3)
    return save(fig, out, "l3_cap_runs.png")


def slow_disk_p99(row: Dict[str, Any], first_wave: int) -> Tuple[float, float]:
    waves = row["waves"][first_wave:]
    rec = [r["ttft_s"] * 1e3 for w in waves for r in w["recompute"] if r.get("ttft_s") is not None]
    hit = [r["ttft_s"] * 1e3 for w in waves for r in w["hit"] if r.get("ttft_s") is not None]
    return nearest_rank(rec, 99), nearest_rank(hit, 99)


def plot_slow_disk(out: Path) -> str:
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8), sharey=True)
    for ax, run, title in ((axes[0], "cpu-2026-11-28-slow-disk-run2", "run 2 (6e9651c)"),
                           (axes[1], "cpu-2026-11-28-slow-disk-run4",
                            "run 4 (loads give up at their deadline)")):
        rows = load_json(RESULTS / run / "slow_disk.json")["rows"]
        rates = list(rows)
        labels = [f"{r} /s" if r != "0" else "unthrottled" for r in rates]
        every = [slow_disk_p99(rows[r], 0) for r in rates]
        later = [slow_disk_p99(rows[r], 1) for r in rates]
        bars(ax, labels, [("recompute p99, waves 1-3", [e[0] for e in every], "#7f7f7f"),
                          ("L2 hit p99, waves 1-3", [e[1] for e in every], "#d62728"),
                          ("recompute p99, waves 2-3", [e[0] for e in later], "#c7c7c7"),
                          ("L2 hit p99, waves 2-3", [e[1] for e in later], "#ff9896")])
        ax.set_title(f"Slow disk, 8 in flight, vLLM CPU build, planner on: {title}", fontsize=9)
        ax.set_xlabel("L2 disk throttle (cgroup blkio)")
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=7)
    axes[0].set_ylabel("TTFT p99, ms (nearest rank)")
    return save(fig, out, "slow_disk_p99.png")


def plot_tp_lookup(out: Path) -> str:
    d = RESULTS / "scheduler-lookup-tp-2026-11-27"
    fig, ax = plt.subplots(figsize=(8, 4.2))
    for name, label, colour in (("before-1a7faf7.json", "before (1a7faf7): a round trip per rank", "#7f7f7f"),
                                ("after-cb233a1.json", "after (cb233a1): one frame for every rank", "#d62728")):
        rows = sorted(load_json(d / name)["scheduler"], key=lambda r: r["tp"])
        ax.plot([r["tp"] for r in rows], [r["p50_us"] for r in rows], "-o", color=colour, label=label + ", p50")
        ax.plot([r["tp"] for r in rows], [r["p99_us"] for r in rows], ":", color=colour, label=label + ", p99")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("tensor-parallel ranks (namespaces looked up)")
    ax.set_ylabel("get_num_new_matched_tokens, µs")
    ax.set_title("Scheduler lookup of a 1,000-unit prompt, vLLM 0.33 scheduler role, 2-vCPU VM (2026-11-27)",
                 fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(True, which="both", alpha=0.3)
    return save(fig, out, "tp_lookup.png")


def plot_sglang(out: Path) -> str:
    report = load_json(RESULTS / "sglang-h100-run4/call2/sglang_gpu.json.gz")["report"]
    sizes = sorted(report["single"], key=int)
    s = report["single"]
    c = report["cross"]
    fig, ax = plt.subplots(figsize=(9, 4.8))
    bars(ax, [f"{int(t) // 1024}K tokens" for t in sizes],
         [("recompute (HiCache, no L3)", [s[t]["none"]["after_flush_ms"] for t in sizes], "#7f7f7f"),
          ("SGLang `file` L3 hit", [s[t]["file"]["after_flush_ms"] for t in sizes], "#1f77b4"),
          ("KVStrata L3 hit", [s[t]["kvstrata"]["after_flush_ms"] for t in sizes], "#d62728"),
          ("`file`, fresh engine B", [c["file_b"][t]["ms"] for t in sizes], "#aec7e8"),
          ("KVStrata, fresh engine B", [c["kvstrata_b"][t]["ms"] for t in sizes], "#ff9896"),
          ("GPU radix hit", [s[t]["none"]["gpu_hit_ms"] for t in sizes], "#2ca02c")], fmt="{:.0f}")
    ax.set_yscale("log")
    ax.set_ylabel("TTFT, ms (median of 3)")
    ax.set_title("SGLang 0.5.17 HiCache L3 on an H100, Llama-3.1-8B geometry, dummy weights (run 4)", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(True, axis="y", which="both", alpha=0.3)
    return save(fig, out, "sglang_ttft.png")


PLOTS: Dict[str, Callable[[Path], str]] = {
    "gpu_ttft_vs_prompt.png": plot_gpu_ttft,
    "gpu_ttft_models.png": plot_gpu_models,
    "node_throughput_ttft.png": plot_node,
    "node_loads_vs_ceiling.png": plot_node_loads,
    "engine_jobs_pcie.png": plot_engine_jobs,
    "l2_vs_fio.png": plot_l2_fio,
    "l3_vs_files.png": plot_l3,
    "l3_cap_runs.png": plot_l3_cap,
    "slow_disk_p99.png": plot_slow_disk,
    "tp_lookup.png": plot_tp_lookup,
    "sglang_ttft.png": plot_sglang,
}


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=HERE, help="directory for the PNGs (default bench/plots/)")
    ap.add_argument("--list", action="store_true", help="print the PNG names and exit")
    args = ap.parse_args(argv)
    if args.list:
        print("\n".join(PLOTS))
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    plt.rcParams.update({"font.family": "DejaVu Sans", "savefig.dpi": DPI, "svg.hashsalt": "kvstrata"})
    for name, fn in PLOTS.items():
        made = fn(args.out)
        assert made == name, (made, name)
        print(f"make_plots: {args.out / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
