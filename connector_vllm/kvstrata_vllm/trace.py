"""An optional timeline of each request's KVStrata steps, for profiling a serving engine.

With KVSTRATA_VLLM_TRACE=<file> set in vLLM's environment, the scheduler and the workers
append one JSON line per step to that file: {"t": CLOCK_MONOTONIC seconds (one clock for
every process of the host), "pid", "ev", "req", ...}. Events: lookup (ms, units), alloc,
load_submit (ms: the submit call), load_done (the completion seen by a worker),
load_reported (the scheduler learnt the load finished), store_submit (ms, units); for a
same-step (layer-wise) load also wait0 / wait_last (the forward pass reached the first and
the last layer's wait_for_layer_load), save (wait_for_save), finish (get_finished) and gpu
(GPU ms between those points, from CUDA events, logged once they completed); every step of
a worker: step_start (start_load_kv), step_save (wait_for_save), step_finished
(get_finished) and hooks (host ms between its wait_for_layer_load calls), with an
empty "req". Unset (the
default), every call is a no-op. Each line is one O_APPEND write, so the lines of
the scheduler and worker processes do not interleave.
"""
from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

_PATH = os.environ.get("KVSTRATA_VLLM_TRACE") or None
_lock = threading.Lock()


def enabled() -> bool:
    return _PATH is not None


def event(name: str, req_id: str, **fields: Any) -> None:
    if _PATH is None:
        return
    line = json.dumps({"t": time.monotonic(), "pid": os.getpid(), "ev": name, "req": req_id,
                       **fields}) + "\n"
    with _lock:
        fd = os.open(_PATH, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)


def hook_gaps(calls: list, end: float) -> None:
    """One "hooks" event: the host ms between a step's wait_for_layer_load calls (and from
    the last one to wait_for_save): count, median, max and where the max was."""
    gaps = [b - a for a, b in zip(calls, calls[1:] + [end])]
    worst = max(range(len(gaps)), key=gaps.__getitem__)
    event("hooks", "", n=len(calls), median_ms=round(sorted(gaps)[len(gaps) // 2] * 1e3, 3),
          max_ms=round(gaps[worst] * 1e3, 3), max_at=worst,
          total_ms=round((end - calls[0]) * 1e3, 3))


class GpuMarks:
    """With the trace on: CUDA events recorded on the current stream at named points of a
    step; end() waits for the last one and logs one "gpu" event, the ms between consecutive
    marks (the host then waits for the forward pass, as vLLM's sampling does right after)."""

    def __init__(self) -> None:
        self._marks: list = []

    def mark(self, name: str) -> None:
        if _PATH is None:
            return
        import torch  # noqa: PLC0415 - only with the trace on, on a GPU worker

        e = torch.cuda.Event(enable_timing=True)
        e.record()
        self._marks.append((name, e))

    def end(self, req_id: str) -> None:
        marks, self._marks = self._marks, []
        if len(marks) < 2:
            return
        marks[-1][1].synchronize()
        event("gpu", req_id, **{f"{a}_{b}": round(ea.elapsed_time(eb), 3)
                                for (a, ea), (b, eb) in zip(marks, marks[1:])})
