#!/usr/bin/env python3
"""Real vLLM engines on a GPU: KVStrata against vLLM's own CPU offloading, in one run.

    python3 bench/vllm_gpu/run.py --out DIR [--quick]      # (scripts/gpu_vllm.sh runs it)

Starts one kvstratad (its L2 on local disk), then five engine processes one after the other
(engine.py; each the same dummy Llama-3.1-8B, bf16, block 16, CUDA graphs on, the same GPU
KV budget): `none` (no connector), `native` (vLLM's OffloadingConnector, CPU),
`kvstrata_async` (the connector with load_mode=async: every load before the request is
scheduled, as before layer-wise loads; its own namespace), `kvstrata` (engine A, the default
load_mode: L1 hits loaded layer by layer in the step that uses them) and `kvstrata_b` (a
second, fresh engine: cross-instance hits, L2 hits after daemon restarts, the daemon killed
during a load). It then compares them against the
targets of the vLLM GPU issue and writes DIR/vllm_gpu.json (everything), DIR/summary.txt
(the tables), DIR/run.log and DIR/kvstratad.log.

A sixth role, `kvstrata_batch`, run only when --roles names it, is `kvstrata` on a daemon
with other settings (ROLE_DAEMON: gpu.copy_strategy=batch, every store and load by DMA; the
default `auto` stores by DMA too since run 14 and loads pieces under 256 KiB staged): an A/B
of the users rounds in one run. A role whose daemon settings differ from the running daemon's restarts it
with its own first, on an empty L1 *and L2* (so both sides of the A/B start alike); name
kvstrata_batch before kvstrata, so that kvstrata's blocks are the ones kvstrata_b finds:
    --roles none,native,kvstrata_batch,kvstrata --keep-daemon ...  then  --roles kvstrata_b --continue

--disk-baseline measures the raw O_DIRECT throughput of the disk under L2 before the first
role (disk_probe.py: dd with 1/4/8 readers in 2 MiB and 64 MiB requests, and 2 MiB files
read by 4 and 16 threads, as the daemon's L2 readers do); the summary prints it next to the
L2-hit row with the daemon's own L2 read rate in those hits (ListTiers read_bytes over the
connector's load_submit -> load_done).

--tp N runs every engine tensor-parallel over N GPUs (--gpu-blocks is per rank); --tp-plan is
the TP=2 run of issue 20 in two device calls of < 10 minutes each (see TP_PLAN). Under --tp > 1
the run also measures each GPU's host-to-device copy ceiling before the first role (ceiling.py;
once per --workdir) and reports each rank's KVStrata L1 load bandwidth against it, and
kvstrata_b ends with the "one rank misses" check (engine.py, one_rank_miss).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))

from report import ALL_ROLES, GIB, ROLE_DAEMON, ROLES, render, report  # noqa: E402
from role_process import run_benchmark, wait_gpu_free  # noqa: E402

# --tp-plan: tensor parallel 2 (nvidia-h200-x2), 8K and 32K prompts, 2 users, in two calls
# (one device call runs 600 s at most; the five roles take ~12 min, mostly engine starts):
#   run.py --tp-plan                                              none, native (~6 min)
#   run.py --tp-plan --roles kvstrata,kvstrata_b --continue       the rest (~4.5 min)
# Options given on the command line win over the plan's.
TP_PLAN = {"tp": 2, "sizes": "8192,32768", "users": 2, "roles": "none,native",
           "role_timeout": 250.0}


def make_spec(args: argparse.Namespace, workdir: Path) -> Dict[str, Any]:
    quick = args.quick
    sizes = [int(x) for x in args.sizes.split(",")] if args.sizes else (
        [1024, 8192] if quick else [1024, 8192, 32768])
    return {
        "tp": args.tp,
        "model": args.model,
        "dtype": args.dtype,
        "kv_cache_dtype": args.kv_cache_dtype,
        "vocab": args.vocab,
        "enforce_eager": args.eager,
        "block_size": args.block_size,
        "sizes": sizes,
        "repeats": args.repeats,
        "max_model_len": args.max_model_len,
        # 3072 blocks of 16 tokens = 48K tokens (6 GiB): the 32K prompt fits, the users'
        # prefixes (12 x 8K = 96K tokens) do not. Per rank under --tp (each rank holds its
        # share of the KV heads of the same 48K tokens).
        "gpu_blocks": args.gpu_blocks,
        "gpu_memory_utilization": 0.85,
        "users": 0 if args.no_users else (args.users or (4 if quick else 12)),
        "user_tokens": args.user_tokens,
        "question_tokens": 64,
        "users_round1_repeats": args.round1_repeats,
        "user_max_tokens": 8,
        "cpu_bytes": args.cache_gib * GIB,       # native offload's CPU cache
        "daemon": {"binary": args.daemon, "workdir": str(workdir / "daemon"),
                   "settings": {"l1.capacity": f"{args.cache_gib}GiB",  # the same capacity
                                "l1.slab_size": "64MiB",
                                "l2.enabled": "true", "l2.path": str(workdir / "daemon" / "l2"),
                                "l2.capacity": "64GiB", "l2.write_queue_blocks": "32768",
                                "sessions.heartbeat_timeout_ms": "10000",
                                **dict(kv.split("=", 1) for kv in args.daemon_set)}},
        "kvstrata_extra": {},
        "role_daemon": ROLE_DAEMON,
    }


def copy_ceiling(devices: int, timeout_s: float = 180.0) -> Dict[str, Any]:
    """ceiling.py in a process of its own, on idle GPUs: each device's pinned host-to-device
    copy bandwidth alone and with every device copying at once ({"error": ...} if it fails)."""
    t0 = time.monotonic()
    try:
        p = subprocess.run([sys.executable, str(HERE / "ceiling.py"), "--devices", str(devices)],
                           capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"error": f"ceiling.py did not finish in {timeout_s:.0f} s"}
    finally:
        wait_gpu_free()
    lines = p.stdout.strip().splitlines()
    if p.returncode != 0 or not lines:
        return {"error": f"ceiling.py exited with {p.returncode}: {p.stderr.strip()[-2000:]}"}
    try:
        out = json.loads(lines[-1])
    except ValueError:
        return {"error": f"ceiling.py printed no JSON: {lines[-1][:500]}"}
    out["seconds"] = round(time.monotonic() - t0, 1)
    return out


def ensure_role_daemon(role: str, spec: Dict[str, Any], workdir: Path) -> None:
    """Before each role: if the role's daemon settings (the run's plus ROLE_DAEMON's for the
    role) differ from the running daemon's, restart the daemon with them, L1 and L2 emptied.
    The running daemon's settings are the run's unless this function restarted it (its pid
    and settings in <workdir>/role_daemon.json; a restart by anyone else, e.g. kvstrata_b's,
    uses the run's)."""
    if not role.startswith("kvstrata"):
        return
    from daemon_ctl import DaemonCtl  # noqa: PLC0415 - needs kvstrata; --help does not
    base = spec["daemon"]["settings"]
    want = {**base, **spec.get("role_daemon", {}).get(role, {})}
    state_path = workdir / "role_daemon.json"
    daemon = DaemonCtl(**{**spec["daemon"], "settings": want})
    running = base
    if state_path.is_file():
        state = json.loads(state_path.read_text())
        if state.get("pid") == daemon.pid():
            running = state["settings"]
    if running == want and daemon.pid() is not None:
        return
    daemon.stop()
    if want.get("l2.path"):
        shutil.rmtree(want["l2.path"], ignore_errors=True)
    took = daemon.start()
    state_path.write_text(json.dumps({"pid": daemon.pid(), "settings": want}))
    extra = {k: v for k, v in want.items() if base.get(k) != v}
    print(f"kvstratad restarted for {role} on an empty L1 and L2 in {took:.1f} s, settings "
          f"{extra or 'of the run'}", flush=True)


def disk_baseline(directory: Path, gib: int = 4) -> Dict[str, Any]:
    """Raw throughput of the disk under L2 (the L2 rows' ceiling): disk_probe.py in a
    process of its own ({"error": ...} if it fails)."""
    try:
        p = subprocess.run([sys.executable, str(HERE / "disk_probe.py"), str(directory),
                            "--gib", str(gib)], capture_output=True, text=True, timeout=300)
        return json.loads(p.stdout.strip().splitlines()[-1])
    except (subprocess.TimeoutExpired, ValueError, IndexError) as err:
        return {"error": f"disk_probe.py: {err}"}


# ---------------------------------------------------------------------- report


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--daemon", default=os.environ.get("KVSTRATA_DAEMON",
                                                       str(REPO / ".bundle" / "bin" / "kvstratad")))
    ap.add_argument("--workdir", default="/tmp/kvs-vllm-bench")
    ap.add_argument("--cache-gib", type=int, default=20,
                    help="CPU cache of both native offload and KVStrata's L1 (GiB)")
    ap.add_argument("--roles", default=",".join(ROLES),
                    help="roles in order (default: %(default)s); also kvstrata_batch (the "
                         "kvstrata role on a daemon with gpu.copy_strategy=batch; name it "
                         "before kvstrata), the controls noop, noop_link, noop_reg "
                         "(noop_connector.py), and any role with a suffix .N (again, in "
                         "another engine process: kvstrata.2)")
    ap.add_argument("--role-timeout", type=float, default=300.0)
    ap.add_argument("--quick", action="store_true", help="1K/8K and 4 users (a smoke run)")
    ap.add_argument("--disk-baseline", action="store_true",
                    help="measure the raw O_DIRECT throughput of the L2 disk first "
                         "(disk_probe.py; needs 8 GiB free there)")
    ap.add_argument("--keep-daemon", action="store_true",
                    help="leave kvstratad running at the end (for a --continue run)")
    ap.add_argument("--continue", dest="cont", action="store_true",
                    help="keep --workdir: reuse its running kvstratad and spec, and report "
                         "the roles of earlier runs too (one run per device call)")
    # The defaults are the benchmark; these make a small run (e.g. a CPU smoke run with
    # vLLM's CPU build and a tiny model).
    ap.add_argument("--model", default=str(HERE / "model"))
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--kv-cache-dtype", default="auto",
                    help="vLLM's --kv-cache-dtype for every role (e.g. fp8: e4m3, scales from "
                         "the checkpoint; dummy weights give scale 1.0)")
    ap.add_argument("--vocab", type=int, default=128256)
    ap.add_argument("--eager", action="store_true", help="no CUDA graphs / torch.compile")
    ap.add_argument("--sizes", help="prompt sizes of the single-request rows, e.g. 1024,8192")
    ap.add_argument("--repeats", type=int, default=3,
                    help="hit runs per size (single-request rows, L2 rows); the median is reported")
    ap.add_argument("--users", type=int, default=0)
    ap.add_argument("--round1-repeats", type=int, default=3,
                    help="the users rounds (1: no reuse, then 2: beyond HBM) this many times, "
                         "fresh prefixes each; medians reported")
    ap.add_argument("--daemon-set", action="append", default=[], metavar="KEY=VALUE",
                    help="a kvstratad setting for this run (repeatable), e.g. "
                         "gpu.copy_strategy=batch")
    ap.add_argument("--no-users", action="store_true",
                    help="skip the users rounds (a profiling run of the single-request rows)")
    ap.add_argument("--user-tokens", type=int, default=8192)
    ap.add_argument("--gpu-blocks", type=int, default=3072)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--max-model-len", type=int, default=34816)
    ap.add_argument("--tp", type=int, default=1,
                    help="tensor-parallel size of every engine (vLLM's mp executor; "
                         "--gpu-blocks is per rank)")
    ap.add_argument("--tp-plan", action="store_true",
                    help="issue 20's TP=2 run, first call: " + " ".join(
                        f"--{k.replace('_', '-')} {v}" for k, v in TP_PLAN.items())
                    + "; second call: --tp-plan --roles kvstrata,kvstrata_b --continue "
                      "(command-line options win over the plan's)")
    args = ap.parse_args(argv)
    if args.tp_plan:  # the plan's values where the command line gives none
        ap.set_defaults(**TP_PLAN)
        args = ap.parse_args(argv)
    return args


def main() -> int:
    args = parse_args()

    def on_continue(spec: Dict[str, Any]) -> None:
        if spec.get("tp", 1) != args.tp:
            print(f"--continue: the spec's tp {spec.get('tp', 1)} applies, not --tp {args.tp}",
                  flush=True)

    def before_roles(spec: Dict[str, Any], results: Dict[str, Any], workdir: Path) -> None:
        if args.disk_baseline:
            results["disk"] = disk_baseline(Path(spec["daemon"]["workdir"]))
            (workdir / "roles" / "disk.json").write_text(json.dumps(results["disk"]))
            print(f"disk under L2: {results['disk']}", flush=True)
        if spec.get("tp", 1) > 1 and "ceiling" not in results:  # before any engine
            results["ceiling"] = copy_ceiling(spec["tp"])
            (workdir / "roles" / "ceiling.json").write_text(json.dumps(results["ceiling"]))
            print(f"host-to-device copy ceilings: {json.dumps(results['ceiling'])}",
                  flush=True)

    return run_benchmark(args, ALL_ROLES, make_spec, report, render, "vllm_gpu.json",
                         HERE / "engine.py", before_roles=before_roles,
                         on_continue=on_continue, before_role=ensure_role_daemon)


if __name__ == "__main__":
    sys.exit(main())
