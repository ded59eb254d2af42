"""No thread of the connector runs beside the engine's forward pass or while it idles.

The engine's main thread runs vLLM's scheduler and, at TP=1, the forward pass; a thread of
the connector (the promotion watch, the heartbeat, the completion readers, the store
threads) that polls or spins would take a CPU and the GIL from it. A hybrid model's L1 hit
in vLLM's real Scheduler with the load planner on (as on a GPU engine: the hit loads before
the step that uses it), its forward pass stood in for by a 0.3 s sleep (the GIL released, so
a busy thread would run all it wants): every other thread of the process together runs at
most 5 % of that time, and as little over half a second of idling after the request.
Measured from /proc (thread_cpu.py), CPU time, not wall time: a loaded machine does not
make it fail.
"""
from __future__ import annotations

import time
from typing import Dict, List

from harness import Engine
from test_hybrid import WINDOW
from test_scheduler import drain_stores, ext, run_and_verify
import thread_cpu

PROMPT_1K = [100 + (i * 7) % 300 for i in range(1030)]   # 64 full blocks + 6 tokens
FORWARD_S = 0.3
IDLE_S = 0.5
SHARE = 0.05   # of the window: the most every other thread together may run


def _engine(make, model_dir, daemon) -> Engine:
    return make(model_dir, ext(daemon, load_planner="on"), window=WINDOW, num_blocks=512,
                batch_tokens=1100)


def _slow_forward(engine: Engine, into: List[Dict[str, float]]) -> None:
    """The first worker's forward pass lasts FORWARD_S more; the CPU of the other threads
    in it goes to `into`."""
    w = engine.workers[0]
    write = w.write

    def forward(*args, **kwargs) -> None:
        write(*args, **kwargs)
        a = thread_cpu.snapshot()
        time.sleep(FORWARD_S)
        into.append(thread_cpu.others(thread_cpu.delta(a, thread_cpu.snapshot())))

    w.write = forward


def test_no_thread_runs_beside_an_l1_hits_forward_pass_or_idle(model_dir, daemon, engines):
    a = _engine(engines, model_dir, daemon)
    run_and_verify(a, a.add(PROMPT_1K, max_tokens=1).request_id)
    drain_stores(a)
    b = _engine(engines, model_dir, daemon)
    forwards: List[Dict[str, float]] = []
    _slow_forward(b, forwards)
    req = b.add(PROMPT_1K, max_tokens=1)
    run_and_verify(b, req.request_id)
    assert b.stats.get("loaded_units", 0) >= 64, b.stats   # the hit loaded (its full-attention units)
    assert forwards, "no forward pass ran"
    print("other threads in the forward passes:", forwards)
    for other in forwards:
        assert sum(other.values()) <= SHARE * FORWARD_S * 1e3, other
    drain_stores(b)
    before = thread_cpu.snapshot()
    time.sleep(IDLE_S)
    idle = thread_cpu.others(thread_cpu.delta(before, thread_cpu.snapshot()))
    print("other threads idle:", idle)
    assert sum(idle.values()) <= SHARE * IDLE_S * 1e3, idle
