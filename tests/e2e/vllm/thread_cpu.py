"""The CPU time of every thread of this process, from /proc (schedstat: ns on a CPU and ns
runnable but waiting for one), for telling which threads run beside an engine's forward pass
(test_thread_cpu.py, bench/vllm_cpu/engine_hit_cpu.py)."""
from __future__ import annotations

import os
import threading
from typing import Dict, List, Tuple

Snapshot = Dict[int, Tuple[str, int, int]]


def snapshot() -> Snapshot:
    """tid -> (name, ns on a CPU, ns waiting for one) of every thread of this process; a
    Python thread is named by its threading name, others by their comm."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    out: Snapshot = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                on, wait = (int(x) for x in f.read().split()[:2])
            with open(f"/proc/self/task/{tid}/comm") as f:
                comm = f.read().strip()
        except OSError:
            continue  # it ended meanwhile
        out[int(tid)] = (names.get(int(tid), comm), on, wait)
    return out


def delta(a: Snapshot, b: Snapshot) -> Dict[str, List[float]]:
    """"name[tid]" -> [ms on a CPU, ms waiting for one] from a to b, for the threads that ran
    (a thread started in between counts from zero)."""
    out: Dict[str, List[float]] = {}
    for tid, (name, on, wait) in b.items():
        on0, wait0 = a[tid][1:] if tid in a else (0, 0)
        if on - on0 or wait - wait0:
            out[f"{name}[{tid}]"] = [round((on - on0) / 1e6, 3), round((wait - wait0) / 1e6, 3)]
    return out


def others(d: Dict[str, List[float]]) -> Dict[str, float]:
    """The ms on a CPU of every thread of a delta but this one (the caller's)."""
    me = threading.get_native_id()
    return {k: v[0] for k, v in d.items() if not k.endswith(f"[{me}]")}
