#!/usr/bin/env python3
"""What a daemon's store costs an engine that computes beside it, by copy strategy.

    python3 bench/gpu/store_interference.py --layouts mla,nhd16 --strategies batch,staged

A stand-in engine, in a process of its own (a CUDA context of its own, as a vLLM or SGLang
engine is beside kvstratad): steps of back-to-back bf16 matmuls, each step timed
(synchronize). The daemon's stores run from this process, one 8K-token SubmitStore job of
the layout after another (fresh keys, evicted after), at --rate GB/s (sleeping between jobs)
and at full speed ("max"). For each daemon strategy (`gpu.copy_strategy`, the daemon
restarted for each) and layout, every phase runs --seconds of engine steps:

  alone     the engine with no stores (the baseline, measured beside every phase pair)
  rate      stores paced to --rate GB/s
  max       stores back to back

and prints the engine's median step time, its slowdown against `alone` of the same pair,
the stores' GB/s and their job p50. A staged store's gather kernel runs in the daemon's
context: without MPS the GPU time-slices the two contexts, so each kernel can stall the
engine beyond its own run time; a DMA store uses copy engines only.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parent))
import engine_jobs  # noqa: E402  (build_cache: the layouts)
import load_latency  # noqa: E402  (start_daemon, stop_daemon, log)
from load_latency import log  # noqa: E402


def engine(conn: Any, m: int, n: int, k: int, per_step: int) -> None:
    """The stand-in engine: answers each ("run", seconds) with its step times (s)."""
    import torch

    a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(k, n, dtype=torch.bfloat16, device="cuda")
    c = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")

    def step() -> float:
        t0 = time.perf_counter()
        for _ in range(per_step):
            torch.matmul(a, b, out=c)
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    for _ in range(20):
        step()
    conn.send("ready")
    while True:
        msg = conn.recv()
        if msg[0] == "stop":
            return
        end, times = time.perf_counter() + msg[1], []
        conn.send("started")
        while time.perf_counter() < end:
            times.append(step())
        conn.send(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layouts", default="mla,nhd16")
    ap.add_argument("--strategies", default="auto,staged",
                    help="gpu.copy_strategy values, each on a fresh daemon")
    ap.add_argument("--rate", type=float, default=4.0, help="paced store rate, GB/s")
    ap.add_argument("--seconds", type=float, default=3.0, help="engine time per phase")
    ap.add_argument("--tokens", type=int, default=8192, help="tokens per store job")
    ap.add_argument("--pairs", type=int, default=2, help="alone/rate/max rounds per case")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                    help="more daemon config overrides (every strategy)")
    ap.add_argument("--out", help="JSON file for every row")
    args = ap.parse_args()

    import torch

    if not torch.cuda.is_available():
        print("no CUDA device: benchmark skipped", flush=True)
        return 2
    import kvstrata

    ctx = mp.get_context("spawn")
    here, there = ctx.Pipe()
    proc = ctx.Process(target=engine, args=(there, 8192, 4096, 4096, 24), daemon=True)
    proc.start()
    assert here.recv() == "ready"
    rows: List[Dict[str, Any]] = []
    print(f"{'strategy':<9}{'layout':<8}{'phase':<7}{'step ms p50':>12}{'slowdown':>10}"
          f"{'store GB/s':>12}{'store job ms p50':>18}", flush=True)
    try:
        for strategy in args.strategies.split(","):
            settings = dict(kv.split("=", 1) for kv in args.set)
            settings["gpu.copy_strategy"] = strategy
            daemon = load_latency.start_daemon("8GiB", settings)
            try:
                with kvstrata.Session(endpoint=daemon.endpoint, client_name="bench-interference",
                                      timeout=60.0) as s:
                    for name in args.layouts.split(","):
                        rows.extend(run_layout(s, name, strategy, args, here))
            finally:
                load_latency.stop_daemon(daemon)
    finally:
        here.send(("stop",))
        proc.join(10)
    if args.out:
        Path(args.out).write_text(json.dumps({"gpu": torch.cuda.get_device_name(0),
                                              "args": vars(args), "rows": rows}, indent=2) + "\n")
    return 0


def run_layout(s: Any, name: str, strategy: str, args: argparse.Namespace, eng: Any) -> List[Dict]:
    cache = engine_jobs.build_cache(name, 2 * (args.tokens // 16))
    ns = s.register_namespace(**cache.spec, salt=f"interference-{name}-{time.time_ns()}")
    reg = s.register_cuda_kv_caches(ns, cache.pieces())
    n = args.tokens // cache.tpb
    job_bytes = n * ns.bytes_per_block
    rng = random.Random(name)
    rows: List[Dict[str, Any]] = []

    def store_once() -> float:
        keys = [rng.randbytes(32) for _ in range(n)]
        t0 = time.perf_counter()
        c = s.wait_job(s.submit_store(ns, reg, keys, range(n)), timeout=60)
        if not c.ok:
            raise RuntimeError(f"{name}: store failed: {c.error}")
        dt = time.perf_counter() - t0
        s.client.evict(fingerprint=ns.fingerprint, keys=keys)
        return dt

    def phase(rate: float) -> Dict[str, Any]:
        """rate: GB/s of stores while the engine runs; 0 = none, inf = back to back."""
        eng.send(("run", args.seconds))
        assert eng.recv() == "started"
        jobs: List[float] = []
        t0 = time.perf_counter()
        while rate and not eng.poll():
            jobs.append(store_once())
            if rate != float("inf"):
                due = t0 + len(jobs) * job_bytes / (rate * 1e9)
                while time.perf_counter() < due and not eng.poll():
                    time.sleep(0.001)
        times = eng.recv()
        span = time.perf_counter() - t0
        return {"step_ms_p50": statistics.median(times) * 1e3, "steps": len(times),
                "store_gbps": len(jobs) * job_bytes / span / 1e9,
                "store_job_ms_p50": statistics.median(jobs) * 1e3 if jobs else None}

    try:
        for _ in range(3):
            store_once()  # Warm-up: staging buffers, slabs.
        for _ in range(args.pairs):
            alone = phase(0)
            for label, rate in (("alone", None), ("rate", args.rate), ("max", float("inf"))):
                r = alone if rate is None else phase(rate)
                r.update(strategy=strategy, layout=name, phase=label,
                         slowdown=r["step_ms_p50"] / alone["step_ms_p50"] - 1)
                rows.append(r)
                job = "-" if r["store_job_ms_p50"] is None else f"{r['store_job_ms_p50']:.2f}"
                print(f"{strategy:<9}{name:<8}{label:<7}{r['step_ms_p50']:>12.2f}"
                      f"{100 * r['slowdown']:>9.2f}%{r['store_gbps']:>12.2f}{job:>18}", flush=True)
    finally:
        s.unregister_cuda_kv_caches(reg)
        del cache
        import torch
        torch.cuda.empty_cache()
    log(f"{strategy} {name}: done")
    return rows


if __name__ == "__main__":
    sys.exit(main())
