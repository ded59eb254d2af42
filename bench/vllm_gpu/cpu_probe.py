"""Where the CPUs went during a benchmark row: every thread of the engine's processes and of
kvstratad, read from /proc before and after the row (no profiler on the lent machines).

snapshot(pids) reads /proc/<pid>/task/<tid>/schedstat (ns on a CPU, ns runnable but
waiting for one) and comm (the thread's name) of each process and all its descendants, and
/proc/stat's CPU totals; delta(a, b, requests) answers per process the busiest threads'
on-CPU and run-queue ms per request, and the whole machine's busy CPUs over the row. Costs
a few ms per snapshot, taken outside the timed requests. calibrate() times a fixed piece of
pure-Python work on the calling thread: a process on a slow or shared core shows it (gpt-oss
run 3's engine A ran 2-3x slow throughout, bench/results/vllm-cpu-2026-11-28-gptoss-ab).
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Dict, List, Optional


def _read(path: str) -> Optional[str]:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def children(pid: int) -> List[int]:
    """pid's descendants (from /proc/<pid>/task/*/children), depth first."""
    out: List[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        for c in (_read(str(task / "children")) or "").split():
            out.append(int(c))
            out += children(int(c))
    return out


def _process(pid: int) -> Dict[str, Any]:
    name = (_read(f"/proc/{pid}/comm") or "?").strip()
    threads: Dict[int, List[Any]] = {}
    for task in Path(f"/proc/{pid}/task").glob("*"):
        stat = _read(str(task / "schedstat"))
        if stat is None:
            continue
        on, wait = (int(x) for x in stat.split()[:2])
        threads[int(task.name)] = [(_read(str(task / "comm")) or "?").strip(), on, wait]
    return {"name": name, "threads": threads}


def _cpu_totals() -> List[int]:
    """/proc/stat's first line: [busy jiffies, all jiffies] over every CPU."""
    fields = [int(x) for x in (_read("/proc/stat") or "cpu 0").splitlines()[0].split()[1:]]
    idle = sum(fields[3:5]) if len(fields) > 4 else 0
    return [sum(fields) - idle, sum(fields)]


def snapshot(roots: List[Optional[int]]) -> Dict[str, Any]:
    """Every thread of these processes and their descendants (None entries skipped)."""
    pids: List[int] = []
    for r in roots:
        if r is not None and r not in pids:
            pids += [r] + [c for c in children(r) if c not in pids]
    return {"t": time.monotonic(), "cpu": _cpu_totals(), "ncpu": os.cpu_count() or 1,
            "procs": {p: _process(p) for p in pids if os.path.isdir(f"/proc/{p}")}}


def delta(a: Dict[str, Any], b: Dict[str, Any], requests: int, top: int = 6) -> Dict[str, Any]:
    """Per process (pid -> name, cpu_ms / runq_ms per request over all its threads, and its
    `top` busiest threads as [tid, name, cpu_ms, runq_ms] per request); busy_cpus: the
    machine's busy CPUs on average over the row (/proc/stat, jiffies)."""
    n = max(1, requests)
    out: Dict[str, Any] = {"requests": requests, "wall_ms": round((b["t"] - a["t"]) * 1e3, 1)}
    busy, total = (y - x for x, y in zip(a["cpu"], b["cpu"]))
    out["busy_cpus"] = round(b["ncpu"] * busy / total, 2) if total else None
    procs = {}
    for pid, pb in b["procs"].items():
        before = a["procs"].get(pid, {"threads": {}})["threads"]
        rows = []
        for tid, (name, on, wait) in pb["threads"].items():
            on0, wait0 = (before[tid][1], before[tid][2]) if tid in before else (0, 0)
            rows.append([tid, name, round((on - on0) / 1e6 / n, 3),
                         round((wait - wait0) / 1e6 / n, 3)])
        rows.sort(key=lambda r: -r[2])
        procs[str(pid)] = {"name": pb["name"], "threads": len(rows),
                           "cpu_ms": round(sum(r[2] for r in rows), 3),
                           "runq_ms": round(sum(r[3] for r in rows), 3), "top": rows[:top]}
    out["procs"] = procs
    return out


def calibrate(loops: int = 200_000, reps: int = 5) -> Dict[str, Any]:
    """The best of `reps` timings of a fixed pure-Python loop on this thread: cpu_ms (its
    on-CPU time: slower on a slow or SMT-shared core) and wall_ms (also the time spent
    waiting for a CPU); the CPU it ran on last and the load average. About 5 x 10 ms."""
    best_cpu = best_wall = float("inf")
    for _ in range(reps):
        c0, w0 = time.thread_time(), time.perf_counter()
        acc = 0
        for i in range(loops):
            acc += i * i % 7
        best_cpu = min(best_cpu, time.thread_time() - c0)
        best_wall = min(best_wall, time.perf_counter() - w0)
    stat = (_read("/proc/self/stat") or "").rsplit(")", 1)[-1].split()
    return {"cpu_ms": round(best_cpu * 1e3, 2), "wall_ms": round(best_wall * 1e3, 2),
            "cpu": int(stat[36]) if len(stat) > 36 else None,
            "loadavg": round(os.getloadavg()[0], 2)}


def lines(probe: Dict[str, Any]) -> List[str]:
    """The probe as text: per process its total and its busiest threads (ms per request)."""
    head = (f"{probe['requests']} requests in {probe['wall_ms']} ms, machine busy CPUs "
            f"{probe['busy_cpus']}")
    out = [head]
    for pid, p in probe["procs"].items():
        if p["cpu_ms"] < 0.05:
            continue
        busiest = ", ".join(f"{name}[{tid}] {cpu}/{runq}" for tid, name, cpu, runq in p["top"]
                            if cpu >= 0.05)
        out.append(f"  {p['name']}[{pid}] {p['threads']} threads: cpu {p['cpu_ms']} ms, "
                   f"runq {p['runq_ms']} ms per request; busiest (cpu/runq ms): {busiest}")
    return out
