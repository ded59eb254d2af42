"""The A/B table of bench/vllm_gpu/ab.sh: for each side (new: this tree, old: build-ab's
commit), each role's single-request TTFT per prompt size over every run of every round
(median, min-max, the number of runs), and new / old of the medians.

    python3 bench/vllm_gpu/ab_report.py RAW_DIR OUT_JSON [--old-label TEXT]

RAW_DIR holds one folder per run, <side>-<round>, each with the run's vllm_gpu.json."""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Dict, List


def collect(raw: Path) -> Dict[str, Dict[str, Dict[str, List[float]]]]:
    """side -> "role size" -> {"ms": every run's TTFT, "cached": every run's cached tokens}."""
    sides: Dict[str, Dict[str, Dict[str, List[float]]]] = {}
    for run in sorted(p for p in raw.iterdir() if p.is_dir()):
        side = run.name.rsplit("-", 1)[0]
        path = run / "vllm_gpu.json"
        rows = sides.setdefault(side, {})
        if not path.exists():
            continue
        results = json.loads(path.read_text()).get("results", {})
        for role, result in results.items():
            for size, row in result.get("phases", {}).get("single", {}).items():
                cell = rows.setdefault(f"{role} {size}", {"ms": [], "cached": []})
                cell["ms"] += row.get("runs_ms", [])
                cell["cached"] += row.get("cached", [])
    return sides


def main(argv: List[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("raw")
    ap.add_argument("out_json")
    ap.add_argument("--old-label", default="old")
    args = ap.parse_args(argv)
    sides = collect(Path(args.raw))
    new, old = sides.get("new", {}), sides.get("old", {})
    table = []
    print(f"bench/vllm_gpu A/B, same device: new = this tree, old = {args.old_label}")
    print(f"{'role':<12}{'tokens':>8}  {'new ms median (min-max) n':>34}  "
          f"{'old ms median (min-max) n':>34}  new/old")
    for key in sorted(set(new) | set(old), key=lambda k: (k.split()[0], int(k.split()[1]))):
        row = {"row": key}
        cells = []
        for name, side in (("new", new), ("old", old)):
            ms = side.get(key, {}).get("ms", [])
            if ms:
                row[name] = {"median_ms": round(statistics.median(ms), 2), "min_ms": min(ms),
                             "max_ms": max(ms), "n": len(ms),
                             "cached": side[key]["cached"]}
                cells.append(f"{row[name]['median_ms']:.1f} ({min(ms):.1f}-{max(ms):.1f}) {len(ms)}")
            else:
                cells.append("-")
        if "new" in row and "old" in row:
            row["new_over_old"] = round(row["new"]["median_ms"] / row["old"]["median_ms"], 3)
        role, size = key.split()
        print(f"{role:<12}{size:>8}  {cells[0]:>34}  {cells[1]:>34}  "
              f"{row.get('new_over_old', '-')}")
        table.append(row)
    Path(args.out_json).write_text(json.dumps({"old": args.old_label, "rows": table}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
