"""The daemon's per-stage times of GPU jobs, read from its debug log (`log.level = debug`):
`job_accepted` (a load's hand-over: pinning its L1 blocks, handing it to the transfer
engine) and `job_done` (every job: waiting for the lane, planning, issuing, the completion
thread, the copies; docs/gpu-data-path.md, "Where a job's time goes"). Used by
engine_jobs.py --stages.
"""
from __future__ import annotations

import re
import statistics
from pathlib import Path
from typing import Any, Dict, List


def load_stages(log_path: Any) -> Dict[str, Dict[str, float]]:
    """p50 of the daemon's job_accepted stage times (debug log) per job size."""
    by_size: Dict[str, Dict[str, List[float]]] = {}
    for m in re.finditer(r"job_accepted job=\d+ kind=load blocks=(\d+) pin_us=(\d+) engine_us=(\d+)",
                         Path(log_path).read_text(errors="replace")):
        row = by_size.setdefault(m.group(1), {"pin_us": [], "engine_us": []})
        row["pin_us"].append(float(m.group(2)))
        row["engine_us"].append(float(m.group(3)))
    return {n: {k: statistics.median(v) for k, v in row.items()} for n, row in by_size.items()}


JOB_DONE = re.compile(r"job_done job=(\d+) kind=(\w+) blocks=(\d+) elapsed_us=(\d+) queued_us=(-?\d+) "
                      r"plan_us=(-?\d+) issue_us=(-?\d+) idle_us=(-?\d+) wait_us=(-?\d+)")
JOB_FIELDS = ("elapsed_us", "queued_us", "plan_us", "issue_us", "idle_us", "wait_us")


def job_stages(log_path: Any, slowest: int = 8) -> Dict[str, Any]:
    """The daemon's per-job stage times (job_done, debug log): p50 per kind and size, and the
    jobs slowest against their group's p50 with where their time went (the tail spikes)."""
    groups: Dict[str, List[Dict[str, int]]] = {}
    for m in JOB_DONE.finditer(Path(log_path).read_text(errors="replace")):
        job = dict(zip(JOB_FIELDS, map(int, m.groups()[3:])), job=int(m.group(1)))
        groups.setdefault(f"{m.group(2)} {m.group(3)}", []).append(job)
    p50 = {g: {f: statistics.median(j[f] for j in jobs) for f in JOB_FIELDS} for g, jobs in groups.items()}
    worst = sorted(((j["elapsed_us"] / max(p50[g]["elapsed_us"], 1), g, j) for g, jobs in groups.items()
                    for j in jobs), key=lambda t: -t[0])[:slowest]
    return {"p50_us": p50, "slowest": [dict(j, group=g, x_p50=round(x, 2)) for x, g, j in worst]}
