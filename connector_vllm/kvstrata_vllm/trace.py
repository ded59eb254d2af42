"""An optional timeline of each request's KVStrata steps, for profiling a serving engine.

With KVSTRATA_VLLM_TRACE=<file> set in vLLM's environment, the scheduler and the workers
append one JSON line per step to that file: {"t": CLOCK_MONOTONIC seconds (one clock for
every process of the host), "pid", "ev", "req", ...}. Events: lookup (ms, units), alloc,
load_submit (ms: the submit call), load_done (the completion seen by a worker),
load_reported (the scheduler learnt the load finished), load_wait (ms: a worker waited for
its asynchronous loads in a step without a forward pass), store_submit (ms, units); for a
same-step (layer-wise) load also wait0 / wait_last (the forward pass reached the first and
the last layer's wait_for_layer_load), save (wait_for_save), finish (get_finished) and gpu
(GPU ms between those points, from CUDA events, logged once they completed); every step of
a worker: step_start (start_load_kv), step_save (wait_for_save), step_finished (the end of
get_finished, with `us`: the µs spent inside each worker hook this step, see timed) and
hooks (host ms between its wait_for_layer_load calls, and what the calling thread did
meanwhile: see hook_gaps), with an empty "req"; every scheduler step: sched (the µs spent
inside each scheduler hook since the last one, and `meta_bytes`: the pickled size of the
metadata sent to the workers -- or, for metadata of more than 256 units, `meta_units`, their
number: pickling a 32K-token load's took ~1 ms inside the step). Unset (the default), every call is a no-op and `timed`
leaves the hooks unwrapped. Each line is one O_APPEND write (one descriptor per process),
so the lines of the scheduler and worker processes do not interleave.
"""
from __future__ import annotations

import functools
import json
import os
import resource
import threading
import time
from typing import Any, Callable, Dict, Optional, Tuple, TypeVar

_PATH = os.environ.get("KVSTRATA_VLLM_TRACE") or None
_lock = threading.Lock()
_fd: Optional[int] = None
_fd_pid = 0
_hook_us: Dict[str, float] = {}   # timed(): µs inside each hook since take_hook_us()
F = TypeVar("F", bound=Callable[..., Any])


def enabled() -> bool:
    return _PATH is not None


def event(name: str, req_id: str, **fields: Any) -> None:
    if _PATH is None:
        return
    global _fd, _fd_pid
    line = json.dumps({"t": time.monotonic(), "pid": os.getpid(), "ev": name, "req": req_id,
                       **fields}) + "\n"
    with _lock:
        if _fd is None or _fd_pid != os.getpid():  # a forked process opens its own
            _fd = os.open(_PATH, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            _fd_pid = os.getpid()
        os.write(_fd, line.encode())


def timed(name: str) -> Callable[[F], F]:
    """A connector hook's decorator: with the trace on, the µs spent inside it are summed
    under `name` until take_hook_us(); with it off the hook is returned unchanged."""
    def wrap(fn: F) -> F:
        if _PATH is None:
            return fn

        @functools.wraps(fn)
        def inner(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                _hook_us[name] = _hook_us.get(name, 0.0) + (time.perf_counter() - t0) * 1e6
        return inner  # type: ignore[return-value]
    return wrap


def take_hook_us(*names: str) -> Dict[str, float]:
    """The summed µs of these hooks (rounded; absent ones left out), reset to zero."""
    return {n: round(_hook_us.pop(n), 1) for n in names if n in _hook_us}


def thread_clock() -> Tuple[float, Optional[int], Optional[int], int, int, Optional[int]]:
    """The calling thread's (wall s, ns on a CPU, ns runnable but waiting for a CPU,
    voluntary and involuntary context switches, CPU it runs on); None where /proc lacks it
    (schedstat needs the kernel's scheduler statistics)."""
    wall = time.monotonic()
    ru = resource.getrusage(resource.RUSAGE_THREAD)
    on = wait = cpu = None
    try:
        with open("/proc/thread-self/schedstat", "rb") as f:
            on, wait = (int(x) for x in f.read().split()[:2])
        with open("/proc/thread-self/stat", "rb") as f:
            cpu = int(f.read().rsplit(b")", 1)[1].split()[36])
    except (OSError, ValueError, IndexError):
        pass
    return wall, on, wait, ru.ru_nvcsw, ru.ru_nivcsw, cpu


def hook_gaps(calls: list, end: float, clock: Optional[tuple] = None) -> None:
    """One "hooks" event: the host ms between a step's wait_for_layer_load calls (and from
    the last one to wait_for_save): count, median, max and where the max was; with `clock`
    (thread_clock() at the first call) also what the calling thread did from there to now:
    cpu_ms on a CPU, runq_ms runnable but not running, vcs / ivcs voluntary (it blocked:
    a lock, the GIL, a sync) and involuntary (preempted) switches, cpus it ran on."""
    gaps = [b - a for a, b in zip(calls, calls[1:] + [end])]
    worst = max(range(len(gaps)), key=gaps.__getitem__)
    more: Dict[str, Any] = {}
    if clock is not None:
        now = thread_clock()
        if now[1] is not None and clock[1] is not None:
            more["cpu_ms"] = round((now[1] - clock[1]) / 1e6, 3)
            more["runq_ms"] = round((now[2] - clock[2]) / 1e6, 3)
        more.update(vcs=now[3] - clock[3], ivcs=now[4] - clock[4], cpus=[clock[5], now[5]])
    event("hooks", "", n=len(calls), median_ms=round(sorted(gaps)[len(gaps) // 2] * 1e3, 3),
          max_ms=round(gaps[worst] * 1e3, 3), max_at=worst,
          total_ms=round((end - calls[0]) * 1e3, 3), **more)


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
