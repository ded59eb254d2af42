"""Where a hybrid model's L1 hit spends the scheduler's steps, in vLLM's real Scheduler on CPU.

The harness of tests/e2e/vllm (harness.Engine: vLLM's Scheduler with KVStrataConnector on
both sides, a fake forward pass, a real kvstratad) lays out a gpt-oss-style model: group 0
full attention, group 1 a sliding window. Engine A runs an N-token prompt (its KV stored);
engine B gets the same prompt: its hit loads asynchronously. For each of B's steps until
the request's forward pass: the step's scheduled tokens, the ms of vLLM's schedule() and the
ms inside each scheduler hook of the connector (and its parts: the lookup, the unit keys,
the load plan, the load's units), median over the repeats. Synchronous steps (a batch queue
of one): the steps from plan to forward are counted by tests/e2e/vllm/test_load_steps.py.

    KVSTRATA_DAEMON=build/daemon/server/kvstratad PYTHONPATH=.vllm026 \\
      .venv-vllm/bin/python bench/vllm_cpu/hybrid_hit_stages.py --tokens 8192,32768
"""
from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "tests/e2e/vllm"), str(REPO / "tests/integration/python")]
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import harness  # noqa: E402
import kvstrata_vllm.scheduler as kv_scheduler  # noqa: E402
from kvs_testing import Daemon, run_daemon, short_tmpdir  # noqa: E402
from tiny_model import make_tiny_model  # noqa: E402

HOOKS = ("get_num_new_matched_tokens", "update_state_after_alloc", "build_connector_meta",
         "update_connector_output")
PARTS = ("_lookup_groups", "_keys")


def timed(obj: Any, name: str, into: Dict[str, float], key: str = "") -> None:
    """Sum the ms inside obj.name into into[key or name]."""
    fn = getattr(obj, name)

    @functools.wraps(fn)
    def inner(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            k = key or name
            into[k] = into.get(k, 0.0) + (time.perf_counter() - t0) * 1e3

    setattr(obj, name, inner)


def one_hit(model: str, endpoint: str, tokens: int, window: int, planner: str) -> List[Dict]:
    """Engine B's steps for an L1 hit of a `tokens`-token prompt: one dict per step."""
    extra = {"endpoint": endpoint, "load_planner": planner}
    blocks = 2 * tokens // harness.BLOCK + 64
    prompt = [100 + (i * 7) % 300 for i in range(tokens)]
    a = harness.Engine(model, extra, window=window, num_blocks=blocks, batch_tokens=tokens + 64)
    b = harness.Engine(model, extra, window=window, num_blocks=blocks, batch_tokens=tokens + 64)
    try:
        a.add(prompt, max_tokens=1)
        a.run()
        a.drain_stores()
        ms: Dict[str, float] = {}
        sched = b.connector.scheduler
        for name in HOOKS + PARTS:
            timed(sched, name, ms)
        timed(sched.plans, "plan", ms, "plan")
        units = kv_scheduler.load_units
        kv_scheduler.load_units = lambda *a_, **k: _time(units, ms, "load_units", *a_, **k)
        req = b.add(prompt, max_tokens=1)
        steps = []
        for _ in range(10):
            ms.clear()
            t0 = time.perf_counter()
            so = b.scheduler.schedule()
            t1 = time.perf_counter()
            b.update(so, b.execute(so))
            steps.append({"tokens": so.total_num_scheduled_tokens,
                          "schedule": (t1 - t0) * 1e3, **ms})
            if req.request_id in so.num_scheduled_tokens:
                break
        kv_scheduler.load_units = units
        return steps
    finally:
        a.shutdown()
        b.shutdown()


def _time(fn: Any, into: Dict[str, float], key: str, *args: Any, **kwargs: Any) -> Any:
    t0 = time.perf_counter()
    try:
        return fn(*args, **kwargs)
    finally:
        into[key] = into.get(key, 0.0) + (time.perf_counter() - t0) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", default="8192,32768")
    ap.add_argument("--window", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--planner", default="on", choices=("on", "off"))
    args = ap.parse_args()
    sizes = [int(t) for t in args.tokens.split(",")]
    work = short_tmpdir()
    daemon = run_daemon(Daemon(work, {}))
    d = next(daemon)
    try:
        for n in sizes:
            harness.vllm_config = functools.partial(_config, max_model_len=n + 64)
            model = str(make_tiny_model(work / f"tiny{n}", max_len=n + 64))
            runs = [one_hit(model, d.endpoint, n, args.window, args.planner)
                    for _ in range(args.repeats)]
            print(f"{n} tokens, window {args.window}, planner {args.planner}: "
                  f"{len(runs[0])} steps to the forward pass (synchronous scheduling)")
            keys = ["schedule", *HOOKS, "plan", *PARTS, "load_units"]
            for i in range(len(runs[0])):
                row = {k: statistics.median(r[i].get(k, 0.0) for r in runs if i < len(r))
                       for k in keys}
                print(f"  step {i} ({runs[0][i]['tokens']} tokens): " +
                      ", ".join(f"{k} {v:.2f}" for k, v in row.items() if v) + " ms")
    finally:
        next(daemon, None)


_config = harness.vllm_config

if __name__ == "__main__":
    main()
