#!/usr/bin/env python3
"""One kvstratad serving every GPU of the node at once (issue 41 item 1): N engine processes
on N devices, each registering its own KV cache, loading alone and all at once, each
device's GB/s against its own ceiling measured in the same run, and the daemon's CPU use.

    python3 bench/gpu/node_loads.py --out DIR [--devices all|0,1,..] [--sizes 8192,32768]

One daemon for the node (load_latency.start_daemon: $KVSTRATA_DAEMON, .bundle/ or build/;
L1 sized for every device's blocks, no L2), then one process per device (multiprocessing,
spawn), like an engine: its own kvstrata.Session, a registered CUDA KV cache of the nhd16
layout (vLLM FlashAttention per-layer [2, N, 16, 8, 128], Llama-3.1-8B: 32 layers, 8 KV heads,
head 128, bf16, 16-token blocks of 2 MiB; kv_caches.build_cache) on its device, sized 2 x
the largest load; it stores its own blocks under its own keys in one job. All processes
(and this one) then follow one plan (node_loads_report.make_plan), meeting on a barrier
before and after every step:
  ceil_alone  each device in turn: torch copy of a pinned 1 GiB CPU tensor into the GPU,
              median of 5 after a warm-up (kv_caches.measure_ceilings, as engine_jobs.py)
  ceil_all    every device at once, the same copies, each copy started on a second barrier
  load_alone  each device in turn, per size: --warmup untimed and --repeats timed load jobs
              (its blocks poisoned first, outside the step's timing)
  load_all    every device at once, per size, the same
A load is one submit_load of the size's blocks and wait_job: its time is submit to
completion; a device's GB/s is bytes / the median of its repeats. The first timed load of
each phase and size is checked byte for byte against the stored blocks. With one device
there are only the alone steps.

The daemon's CPU use: this process reads the CPU time of the daemon's threads
(/proc/<pid>/task/*/schedstat, in ns; /proc/<pid>/stat where missing) just before each
step's first barrier and just after its second, and divides by the wall time between the
two barriers: cores used while the loads run (and ms of CPU per GB loaded).

Output under --out (the driver adds node_loads.log): node_loads.json (every figure and the
processes' raw records) and summary.txt (the table): per device the ceiling alone and all
at once, load GB/s alone and all at once per size, % of its own ceilings, PASS/FAIL (target:
all at once >= 85% of the device's all-at-once ceiling; with one device, alone against
alone), the aggregate GB/s, the daemon's CPU, bytes checked and wrong. Exit status: 0 when
the run completed (the verdict is in the table), 1 on an error or a wrong byte, 2 when it
cannot run (no torch, no CUDA device, bad arguments).

On the lent GPU machine (no network; the repository's working tree travels with each call,
ignored paths only when carried). Here, once:
    bash scripts/bundle.sh && bash scripts/bundle_python.sh     # .bundle/: daemon + wheel
Then one device call: run tool, kind "nvidia-h100-x4" (or "nvidia-h200-x4"), carry
[".bundle"], command:
    bash bench/gpu/run_node_loads.sh
(installs the client wheel into /tmp/kvsite, prints nvidia-smi's links and topology, runs
this script with its defaults under a 300 s limit; $OUT gets node_loads.json, summary.txt,
node_loads.log). Extra arguments go to this script, e.g.
`bash bench/gpu/run_node_loads.sh --devices 0,1 --repeats 5`. On two H200s (asked as
nvidia-h100-x2) `bash bench/gpu/run_node_loads.sh --repeats 5` took 29 s of the call (the
benchmark itself 16 s: daemon start with an 11 GiB L1, set-up, 39 steps); four GPUs with
the defaults (~21 GiB L1, 4 set-ups, 115 steps): expect under 2 minutes, plus the machine's
start.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import queue
import random
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))
import load_latency  # noqa: E402  (start_daemon, stop_daemon, process_cpu_seconds)
from kv_caches import GIB, build_cache, measure_ceilings, wait_ok  # noqa: E402
from node_loads_report import (Step, format_summary, l1_capacity, make_plan,  # noqa: E402
                               parse_devices, parse_sizes, summarize)

BLOCK_BYTES = 2 << 20  # nhd16, Llama-3.1-8B: 2 (K, V) x 32 layers x 16 tokens x 8 x 128 x bf16


def log(msg: str) -> None:
    print(f"[node_loads {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def daemon_cpu_seconds(pid: Optional[int]) -> float:
    """CPU seconds of the daemon's threads: the sum of /proc/<pid>/task/*/schedstat's first
    field (ns; a thread that exits between two readings takes its time with it), else
    user + system from /proc/<pid>/stat (10 ms steps). 0 when the pid is unknown."""
    if pid is None:
        return 0.0
    total, read = 0, 0
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                total += int((task / "schedstat").read_text().split()[0])
                read += 1
            except (OSError, ValueError, IndexError):  # A thread that just exited.
                continue
    except OSError:
        read = 0
    return total / 1e9 if read else load_latency.process_cpu_seconds(pid)


# ---------------------------------------------------------------------- one engine


class GpuEngine:
    """What one engine process does on its device: set-up (cache, session, registration,
    the stored blocks), then per step: prepare (poison a load's destination blocks), the
    timed part, and the byte check of a size's first timed load."""

    def __init__(self, device: int, cfg: Dict[str, Any]) -> None:
        self.device, self.cfg = device, cfg
        self.n_max: int = cfg["n_max"]
        self.session: Any = None
        self.reg: Any = None

    def setup(self) -> Dict[str, Any]:
        import torch

        import kvstrata

        d, n = self.device, self.n_max
        torch.cuda.set_device(d)
        self.cache = build_cache("nhd16", 2 * n, device=f"cuda:{d}")
        self.session = kvstrata.Session(endpoint=self.cfg["endpoint"],
                                        client_name=f"bench-node-loads-cuda{d}", timeout=60.0)
        self.ns = self.session.register_namespace(**self.cache.spec, salt=self.cfg["salt"])
        t0 = time.perf_counter()
        self.reg = self.session.register_cuda_kv_caches(self.ns, self.cache.pieces())
        register_s = time.perf_counter() - t0
        self.bb = self.ns.bytes_per_block
        rng = random.Random(f"{self.cfg['salt']}-{d}")  # Each device its own keys.
        self.keys = [rng.randbytes(32) for _ in range(n)]
        self.cache.poison(0, n, lambda v: v.random_(0, 256))  # The stored blocks' contents.
        t0 = time.perf_counter()
        wait_ok(self.session, self.session.submit_store(self.ns, self.reg, self.keys, range(n)),
                f"cuda:{d}: store of {n} blocks")
        store_s = time.perf_counter() - t0
        desc = self.reg.description
        return {"gpu": torch.cuda.get_device_name(d), "gpu_uuid": desc.gpu_uuid,
                "block_bytes": self.bb, "num_blocks": desc.num_blocks,
                "pieces_per_block": len(desc.pieces), "register_s": register_s,
                "store_blocks": n, "store_gbps": n * self.bb / store_s / 1e9}

    def prepare(self, step: Step) -> None:
        if step.phase.startswith("load"):
            self.cache.poison(self.n_max, step.blocks)  # Loads land in [n_max, n_max + n).

    def timed(self, step: Step, sync: Callable[[], Any]) -> Optional[Dict[str, Any]]:
        if step.phase.startswith("ceil"):
            ceil = measure_ceilings(f"cuda:{self.device}", sizes=(("1GiB", GIB),), directions=("h2d",),
                                    before_each=sync if step.phase == "ceil_all" else None)
            return {"phase": step.phase, "gbps": ceil["h2d_1GiB_gbps"]}
        n, dst = step.blocks, self.n_max
        t0 = time.monotonic()  # CLOCK_MONOTONIC: one clock for every process of the node.
        job = self.session.submit_load(self.ns, self.reg, self.keys[:n], range(dst, dst + n))
        t1 = time.monotonic()
        daemon_s = wait_ok(self.session, job, f"cuda:{self.device}: {step.phase} of {n} blocks")
        t2 = time.monotonic()
        if step.rep < 0:
            return None
        return {"phase": step.phase, "blocks": n, "rep": step.rep, "start": t0, "end": t2,
                "submit_s": t1 - t0, "job_s": t2 - t0, "daemon_s": daemon_s}

    def check(self, step: Step) -> Optional[Dict[str, Any]]:
        if not (step.phase.startswith("load") and step.rep == 0):
            return None
        n = step.blocks
        return {"phase": step.phase, "blocks": n, "checked_bytes": n * self.bb,
                "wrong_bytes": self.cache.wrong_bytes(self.n_max, 0, n)}

    def close(self) -> None:
        if self.session is not None:
            if self.reg is not None:
                self.session.unregister_cuda_kv_caches(self.reg)
            self.session.close()


def worker_main(device: int, make_engine: Callable[[int, Dict[str, Any]], Any], cfg: Dict[str, Any],
                plan: List[Step], node: Any, engines: Any, results: Any) -> None:
    """One device's process: the engine's set-up, then every step of the plan between two
    waits on the node's barrier (this process acts only in the steps naming its device);
    puts {"device", set-up info, "records"} or {"device", "error"} on `results`. A failure
    breaks both barriers, so that every process stops instead of waiting."""
    out: Dict[str, Any] = {"device": device, "records": []}
    eng = None
    try:
        eng = make_engine(device, cfg)
        out.update(eng.setup())
        node.wait(cfg["setup_timeout"])
        for step in plan:
            mine = device in step.devices
            if mine:
                eng.prepare(step)
            node.wait(cfg["step_timeout"])
            rec = eng.timed(step, lambda: engines.wait(cfg["step_timeout"])) if mine else None
            node.wait(cfg["step_timeout"])
            checked = eng.check(step) if mine else None
            out["records"] += [r for r in (rec, checked) if r is not None]
    except threading.BrokenBarrierError:
        out["error"] = "stopped: another process failed or a step timed out (barrier broken)"
    except BaseException as err:  # Reported, not raised: the parent writes the report.
        out["error"] = f"{type(err).__name__}: {err}"
        node.abort()
        engines.abort()
    finally:
        try:
            if eng is not None:
                eng.close()
        except Exception as err:
            out.setdefault("close_error", f"{type(err).__name__}: {err}")
        results.put(out)


# ---------------------------------------------------------------------- the node


def run_node(devices: Sequence[int], plan: List[Step], cfg: Dict[str, Any],
             daemon_pid: Optional[int], make_engine: Callable[[int, Dict[str, Any]], Any] = GpuEngine
             ) -> Dict[str, Any]:
    """Spawns one worker per device and follows the plan with them, sampling the daemon's
    CPU around every step. Returns {"workers": {device: result}, "windows": [...],
    "daemon_cpu_run": {...}, "error": ...}."""
    ctx = mp.get_context("spawn")
    node, engines, results = ctx.Barrier(len(devices) + 1), ctx.Barrier(len(devices)), ctx.Queue()
    procs = {d: ctx.Process(target=worker_main, name=f"node-loads-{d}", daemon=True,
                            args=(d, make_engine, cfg, plan, node, engines, results)) for d in devices}
    for p in procs.values():
        p.start()
    out: Dict[str, Any] = {"workers": {}, "windows": [], "error": None}
    cpu0, wall0 = daemon_cpu_seconds(daemon_pid), time.perf_counter()
    try:
        node.wait(cfg["setup_timeout"])
        log(f"{len(devices)} engine processes ready; {len(plan)} steps")
        for i, step in enumerate(plan):
            c0 = daemon_cpu_seconds(daemon_pid)
            node.wait(cfg["step_timeout"])
            t0 = time.perf_counter()
            node.wait(cfg["step_timeout"])
            t1 = time.perf_counter()
            c1 = daemon_cpu_seconds(daemon_pid)
            if step.timed_load and daemon_pid:
                out["windows"].append({"phase": step.phase, "blocks": step.blocks, "rep": step.rep,
                                       "devices": list(step.devices), "wall_s": t1 - t0,
                                       "cpu_s": c1 - c0})
            if i + 1 == len(plan) or plan[i + 1].phase != step.phase:
                log(f"{step.phase} done")
    except threading.BrokenBarrierError:
        out["error"] = "an engine process failed or a step timed out (its error below)"
    if daemon_pid:
        out["daemon_cpu_run"] = {"cpu_s": daemon_cpu_seconds(daemon_pid) - cpu0,
                                 "wall_s": time.perf_counter() - wall0}
    deadline = time.monotonic() + cfg["step_timeout"]
    while len(out["workers"]) < len(devices) and time.monotonic() < deadline:
        try:
            r = results.get(timeout=1.0)
            out["workers"][r["device"]] = r
        except queue.Empty:
            if not any(p.is_alive() for p in procs.values()):
                try:  # The last results may still be in the pipe.
                    r = results.get(timeout=1.0)
                    out["workers"][r["device"]] = r
                    continue
                except queue.Empty:
                    break
    for d, p in procs.items():
        p.join(10)
        if p.is_alive():
            p.terminate()
            p.join(5)
        w = out["workers"].setdefault(d, {"device": d})
        if "error" not in w and (p.exitcode or "records" not in w):
            w["error"] = f"no result; the process's exit code {p.exitcode}"
    return out


# ---------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="node-loads-out",
                    help="folder for node_loads.json and summary.txt (default %(default)s)")
    ap.add_argument("--devices", default="all", help="CUDA devices: all (default) or 0,1,..")
    ap.add_argument("--sizes", default="8192,32768", help="tokens per load job, comma-separated "
                    "multiples of 16 (default %(default)s)")
    ap.add_argument("--repeats", type=int, default=10, help="timed loads per phase, size and "
                    "device (default %(default)s)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed loads before them (default %(default)s)")
    ap.add_argument("--target", type=float, default=0.85, help="fraction of the ceiling a "
                    "device's load must reach (default %(default)s)")
    ap.add_argument("--l1", help="L1 capacity of the started daemon (default: every device's "
                    "blocks x 1.25 + 1 GiB)")
    ap.add_argument("--endpoint", help="a running kvstratad (default: start one; its CPU is "
                    "then not measured)")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                    help="config override of the started daemon, e.g. gpu.copy_streams=8")
    ap.add_argument("--step-timeout", type=float, default=120.0,
                    help="seconds a step may take before the run stops (default %(default)s)")
    ap.add_argument("--setup-timeout", type=float, default=240.0, help="seconds for the "
                    "processes' set-up: torch, the cache, registration, store (default %(default)s)")
    return ap


def check_args(args: argparse.Namespace) -> List[int]:
    """The sizes in blocks; ValueError for a bad --sizes, --repeats, --warmup or --target."""
    if args.repeats < 1 or args.warmup < 0:
        raise ValueError("--repeats must be >= 1 and --warmup >= 0")
    if not 0 < args.target <= 1:
        raise ValueError("--target is a fraction in (0, 1]")
    if any("=" not in kv for kv in args.set):
        raise ValueError("--set takes SECTION.KEY=VALUE")
    return parse_sizes(args.sizes)


def write_outputs(out_dir: Path, result: Dict[str, Any]) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "node_loads.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    (out_dir / "summary.txt").write_text(format_summary(result) + "\n")
    log(f"wrote {out_dir / 'node_loads.json'} and {out_dir / 'summary.txt'}")


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        sizes = check_args(args)
    except ValueError as err:
        print(f"node_loads: {err}", file=sys.stderr)
        return 2
    try:
        import torch
    except ImportError as err:
        print(f"node_loads: torch is not importable ({err}): needs a GPU machine", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("node_loads: no CUDA device: benchmark not run", file=sys.stderr)
        return 2
    try:
        devices = parse_devices(args.devices, torch.cuda.device_count())
    except ValueError as err:
        print(f"node_loads: {err}", file=sys.stderr)
        return 2
    n_max = max(sizes)
    plan = make_plan(devices, sizes, args.repeats, args.warmup)
    l1 = args.l1 or l1_capacity(len(devices), n_max, BLOCK_BYTES)
    result: Dict[str, Any] = {
        "benchmark": "kvstrata node loads: one daemon, one engine process per GPU (issue 41)",
        "devices": devices, "gpus": [torch.cuda.get_device_name(d) for d in devices],
        "torch": torch.__version__, "layout": "nhd16", "block_bytes": BLOCK_BYTES,
        "sizes_tokens": [n * 16 for n in sizes], "repeats": args.repeats, "warmup": args.warmup,
        "target": args.target, "l1": None if args.endpoint else l1, "daemon_settings": args.set,
        "error": None}
    log(f"devices {devices} ({', '.join(sorted(set(result['gpus'])))}); sizes "
        f"{result['sizes_tokens']} tokens; {args.repeats} repeats; L1 {result['l1']}")
    daemon, endpoint, run = None, args.endpoint, {"workers": {}, "windows": []}
    try:
        if endpoint is None:
            daemon = load_latency.start_daemon(l1, dict(kv.split("=", 1) for kv in args.set))
            endpoint = daemon.endpoint
            log(f"kvstratad pid {daemon.proc.pid} on {endpoint}")
        cfg = {"endpoint": endpoint, "n_max": n_max, "salt": f"node-loads-{os.getpid()}-{time.time_ns()}",
               "step_timeout": args.step_timeout, "setup_timeout": args.setup_timeout}
        run = run_node(devices, plan, cfg, daemon.proc.pid if daemon else None)
        result["error"] = run.get("error")
    except (SystemExit, KeyboardInterrupt, Exception) as err:  # Still write what there is.
        result["error"] = f"{type(err).__name__}: {err}"
    finally:
        if daemon is not None:
            if result["error"] or not daemon.running():
                result["daemon_log_tail"] = daemon.log_tail()
            load_latency.stop_daemon(daemon)
    workers = dict(sorted(run["workers"].items()))
    result["engines"] = {str(d): {k: v for k, v in w.items() if k != "records"}
                         for d, w in workers.items()}
    result["daemon_cpu_run"] = run.get("daemon_cpu_run")
    result["summary"] = summarize(devices, sizes, BLOCK_BYTES, workers, run["windows"], args.target)
    result["windows"] = run["windows"]
    result["records"] = {str(d): w.get("records", []) for d, w in workers.items()}
    print(format_summary(result), flush=True)
    write_outputs(Path(args.out), result)
    s = result["summary"]
    return 1 if result["error"] or s["errors"] or s["wrong_bytes"] or not s["checked_bytes"] else 0


if __name__ == "__main__":
    sys.exit(main())
