#!/usr/bin/env python3
"""The L3 shared cap over many runs (issue 46: the cap held at every sample over 20 runs):
l3_gluster.py's cap part -- 2 and 4 daemons on the two FUSE mounts of one GlusterFS volume,
each writing its share of 2-4x the cap -- run N times, each run on a fresh directory; prints
every run's peak (the brick's block-file bytes over the cap, sampled every 0.25 s) and the
worst, and fails when a sample passes --limit.

    sudo KVSTRATA_DAEMON=build/daemon/server/kvstratad .venv/bin/python \\
        bench/tiers/l3_cap_runs.py --runs 20 --out bench/results/<dir>
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import l3_gluster as g  # noqa: E402  (bench_cap, its fixtures and its results)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--writers", default="2,4", help="daemons per run, comma-separated")
    ap.add_argument("--per-writer", type=int, default=1000, help="blocks each daemon writes")
    ap.add_argument("--cap-mib", type=int, default=64)
    ap.add_argument("--limit", type=float, default=1.05, help="x the cap, at every sample")
    ap.add_argument("--out", type=Path, help="directory for cap_runs.json")
    args = ap.parse_args()
    reason = g.unavailable_reason()
    if reason:
        g.say(f"l3_cap_runs: cannot run here: {reason}")
        return 2
    writers = [int(w) for w in args.writers.split(",")]
    cap = args.cap_mib * g.MIB
    runs = {w: [] for w in writers}
    work = g.short_tmpdir()
    with g.GlusterCluster(g.short_tmpdir()) as gl:
        vol = gl.volume("capruns", mounts=2)
        for r in range(args.runs):
            for w in writers:
                g.bench_cap(vol, work, w, args.per_writer, cap, tag=f"r{r}")
                row = g.results[f"cap_{w}"]
                over = sum(1 for _, b, _ in row["series"] if b > args.limit * cap)
                runs[w].append({"peak_x": row["peak_x"], "samples": row["samples"],
                                "over_limit": over, "written": row["written"],
                                "dropped": row["dropped"]})
    worst = 0.0
    for w in writers:
        peaks = [x["peak_x"] for x in runs[w]]
        over = sum(x["over_limit"] for x in runs[w])
        samples = sum(x["samples"] for x in runs[w])
        worst = max(worst, max(peaks))
        g.say(f"{w} writers, {args.runs} runs: peak max {max(peaks):.3f}x, median "
              f"{statistics.median(peaks):.3f}x; samples over {args.limit}x: {over} of {samples}; "
              f"runs with one: {sum(1 for x in runs[w] if x['over_limit'])}")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "cap_runs.json").write_text(json.dumps(
            {"limit": args.limit, "cap": cap, "per_writer": args.per_writer, "runs": runs},
            indent=1))
    ok = worst <= args.limit
    g.say(f"RESULT: {'PASS' if ok else 'FAIL'} (worst peak {worst:.3f}x, limit {args.limit}x)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
