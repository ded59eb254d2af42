"""The daemon's per-stage times of GPU jobs, read from its debug log (`log.level = debug`):
`job_accepted` (a load's hand-over: pinning its L1 blocks, handing it to the transfer
engine) and `job_done` (every job: waiting for the lane, planning, issuing, the completion
thread, the copies; docs/gpu-data-path.md, "Where a job's time goes"). Used by
engine_jobs.py --stages.
"""
from __future__ import annotations

import re
import statistics
import time
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
                      r"plan_us=(-?\d+) issue_us=(-?\d+) idle_us=(-?\d+) wait_us=(-?\d+)"
                      r"(?: gpu_us=(-?\d+))?(?: group_us=(-?\d+) copies_2d=(-?\d+) "
                      r"copy_entries=(-?\d+))?(?: settle_us=(-?\d+))?")
JOB_FIELDS = ("elapsed_us", "queued_us", "plan_us", "issue_us", "idle_us", "wait_us", "gpu_us",
              "group_us", "copies_2d", "copy_entries", "settle_us")


def job_stages(log_path: Any, slowest: int = 8) -> Dict[str, Any]:
    """The daemon's per-job stage times (job_done, debug log): p50 per kind and size, and the
    jobs slowest against their group's p50 with where their time went (the tail spikes)."""
    groups: Dict[str, List[Dict[str, int]]] = {}
    for m in JOB_DONE.finditer(Path(log_path).read_text(errors="replace")):
        job = dict(zip(JOB_FIELDS, (int(g or 0) for g in m.groups()[3:])), job=int(m.group(1)))
        groups.setdefault(f"{m.group(2)} {m.group(3)}", []).append(job)
    p50 = {g: {f: statistics.median(j[f] for j in jobs) for f in JOB_FIELDS} for g, jobs in groups.items()}
    worst = sorted(((j["elapsed_us"] / max(p50[g]["elapsed_us"], 1), g, j) for g, jobs in groups.items()
                    for j in jobs), key=lambda t: -t[0])[:slowest]
    return {"p50_us": p50, "slowest": [dict(j, group=g, x_p50=round(x, 2)) for x, g, j in worst]}


JSON_LINE = re.compile(r'\{"ts":"([^"]+)","level":"\w+","msg":"(job_accepted|job_done) job=(\d+) ([^"]*)"\}')


def _epoch(ts: str) -> float:
    from datetime import datetime
    return datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()


class ClientTimeline:
    """The client's side of a timeline: when each timed job was submitted and waited for, and
    when the session's job-socket reader had its completion frame."""

    def __init__(self) -> None:
        self.receipts: List[Any] = []  # (time.time(), daemon job id)
        self.jobs: List[Dict[str, Any]] = []

    def watch(self, session: Any) -> None:
        """Notes every completion frame; call before the session's job socket exists (it
        binds the callback then)."""
        filed = session._gpu._on_job_completion

        def noted(c: Any) -> None:
            self.receipts.append((time.time(), c.job_id))
            filed(c)
        session._gpu._on_job_completion = noted

    def note(self, group: str, t0: float, t2: float) -> None:
        """A job of `group` submitted at t0 whose wait returned at t2 (time.time())."""
        got = [r for r in self.receipts if t0 <= r[0] <= t2]
        self.jobs.append({"group": group, "t0": t0, "t2": t2,
                          "receipt": got[-1][0] if got else None,
                          "daemon_job": got[-1][1] if got else -1})

    def summary(self, log_path: Any) -> Dict[str, Dict[str, float]]:
        return timeline(log_path, self.jobs)


def timeline(log_path: Any, jobs: List[Dict[str, Any]], slowest: int = 3) -> Dict[str, Dict[str, Any]]:
    """Each client job beside the daemon's stages on one clock (the wall clock; the daemon at
    log.level=debug, log.format=json, whose lines carry microseconds). `jobs`: the client's
    records {group, t0, t1, t2, daemon_job, receipt} (time.time(): submit called, submit
    returned, wait returned; the completion frame's receipt in the thread that read it). p50 per
    group of, in microseconds:
      to_start   submit called -> the daemon started the job (after its checks and lookup)
      daemon     the daemon's job (elapsed_us)
      gpu        of which on the GPU (gpu_us: CUDA events around the copies)
      gpu_wake   issue_us + wait_us - gpu_us: mostly the completion thread's wake-up
      settle     the job's end -> its job_done line (a store's commit)
      to_reader  job_done line -> the client had the completion frame (in the thread that read
                 it: the waiting thread itself while it waits, kvstrata.job_socket)
      to_waiter  that receipt -> the waiting thread returned from wait_job
    and, under "slowest", the `slowest` jobs of the group (by client time) with each part.
    """
    done: Dict[int, Dict[str, float]] = {}
    for m in JSON_LINE.finditer(Path(log_path).read_text(errors="replace")):
        fields = {k: float(v) for k, v in re.findall(r"(\w+)=(-?\d+)", m.group(4))}
        if m.group(2) == "job_done":
            done[int(m.group(3))] = dict(fields, ts=_epoch(m.group(1)))
    parts: Dict[str, Dict[str, List[float]]] = {}
    for j in jobs:
        d = done.get(j.get("daemon_job", -1))
        if d is None or j.get("receipt") is None:
            continue
        end = d["ts"] - d.get("settle_us", 0) / 1e6  # The daemon's FinishJob.
        start = end - d["elapsed_us"] / 1e6
        row = parts.setdefault(j["group"], {k: [] for k in (
            "to_start", "daemon", "gpu", "gpu_wake", "settle", "to_reader", "to_waiter", "client")})
        row["to_start"].append(start - j["t0"])
        row["daemon"].append(d["elapsed_us"] / 1e6)
        row["gpu"].append(d.get("gpu_us", 0) / 1e6)
        row["gpu_wake"].append((d["issue_us"] + d["wait_us"] - d.get("gpu_us", 0)) / 1e6)
        row["settle"].append(d.get("settle_us", 0) / 1e6)
        row["to_reader"].append(j["receipt"] - d["ts"])
        row["to_waiter"].append(j["t2"] - j["receipt"])
        row["client"].append(j["t2"] - j["t0"])
    out: Dict[str, Dict[str, Any]] = {}
    for g, row in parts.items():
        out[g] = {k: round(statistics.median(v) * 1e6, 1) for k, v in row.items()}
        out[g]["jobs"] = len(row["client"])
        worst = sorted(range(len(row["client"])), key=lambda i: -row["client"][i])[:slowest]
        out[g]["slowest"] = [{k: round(row[k][i] * 1e6, 1) for k in row} for i in worst]
    return out


def report_stages(log_path: Any, log: Any, client: Any = None) -> Dict[str, Any]:
    """The daemon's stage figures (and, given a ClientTimeline, the timeline) for a result
    file, each also handed to `log` as a line."""
    out: Dict[str, Any] = {"load_stages_us_p50": load_stages(log_path)}
    log(f"daemon load hand-over, p50 us by blocks: {out['load_stages_us_p50']}")
    out["job_stages"] = stages = job_stages(log_path)
    for g, v in sorted(stages["p50_us"].items()):
        log(f"daemon job stages p50 ({g} blocks): " + ", ".join(f"{k} {x:.0f}" for k, x in v.items()))
    for j in stages["slowest"]:
        log(f"slow job ({j['group']} blocks, x{j['x_p50']} p50): " +
            ", ".join(f"{k} {j[k]}" for k in JOB_FIELDS))
    if client is not None:
        out["timeline_us_p50"] = tl = client.summary(log_path)
        for g, v in tl.items():
            log(f"timeline p50 us ({g} blocks): " + ", ".join(
                f"{k} {x:g}" for k, x in v.items() if k != "slowest"))
            for j in v["slowest"]:
                log(f"timeline slow job ({g} blocks): " + ", ".join(f"{k} {x:g}" for k, x in j.items()))
    return out
