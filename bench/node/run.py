#!/usr/bin/env python3
"""The node benchmark: real `vllm serve` replicas over HTTP behind a router, one kvstratad
for the whole node.

    python3 bench/node/run.py --out DIR [--plan none:rr,native:rr+sticky,...] [options]
    python3 bench/node/run.py --out DIR --continue          # the rest, in a second call
    python3 bench/node/run.py --out DIR --smoke             # CPU: vLLM's CPU build, tiny model
    python3 bench/node/run.py --out DIR --faults restart,kill   # + fault phases per role

One replica per GPU (replicas.py: CUDA_VISIBLE_DEVICES=i, port 8100 + i, dummy weights,
GPU KV limited by --gpu-blocks so that the workload's KV does not fit). For each role of the
plan (roles.py: none, native, kvstrata, kvstrata_inline, kvstrata_async, lmcache) the replicas are started once and serve
that role's routing modes (router.py: rr, least, sticky) one after the other; each mode
sends fresh multi-turn conversations (workload.py, a seed per mode: nothing cached from the
mode before it, and the same conversations in every role) through the router with
--concurrency requests in flight (loadgen.py, client.py). Per mode: wall time, requests/s,
prompt tokens/s, TTFT p50/p90/p99 of first turns and of later turns, cached prompt tokens
(per request from the server, and each replica's Prometheus counters: metrics.py), and the
outputs (token ids, first-token logprob of every turn) compared with the `none` role's
(stats.py). kvstrata: the daemon's GetStats counters per mode too. --faults restart,kill
adds, after a role's modes, a rolling restart of one replica and a SIGKILL of one replica
during its loads (faults.py, issue 41 item 3).

Results: DIR/node.json (everything, rewritten after every mode), DIR/summary.txt,
DIR/replica_logs.txt (each replica log's tail), DIR/kvstratad.log. A call stops before a
role or mode that would not end within --budget-s; --continue (same --workdir) runs what is
left and reports everything.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))

import gauges  # noqa: E402
import metrics  # noqa: E402
from faults import FAULTS, FaultRunner, daemon_probe, parse_faults, render_faults  # noqa: E402
from replicas import ReplicaSet, ServerSpec, SERVED_NAME  # noqa: E402
from report import render  # noqa: E402
from roles import kv_transfers, lmcache_module, parse_plan, routing, uses_daemon  # noqa: E402
from router import Router  # noqa: E402
from workload import WorkloadSpec, make_conversations, tokens  # noqa: E402

GIB = 1 << 30
DEFAULT_PLAN = "none:rr,native:rr+sticky,kvstrata:rr+least+sticky"
# --smoke: vLLM's CPU build, a tiny model (tests/e2e/vllm/tiny_model.py), a handful of short
# conversations; block size 32 (vLLM's CPU attention takes multiples of 32 only). Options
# given on the command line win.
SMOKE = {"plan": "none:rr+sticky,kvstrata:rr+sticky", "replicas": 2, "dtype": "float32",
         "block_size": 32, "gpu_blocks": 80, "max_model_len": 2048, "max_num_seqs": 8,
         "gpu_memory_utilization": 0.1, "conversations": 6, "turns": 3, "prefix_tokens": 256,
         "first_user_tokens": 128, "user_tokens": 64, "max_tokens": 8, "concurrency": 4,
         "cpu_gib": 0.25, "start_timeout": 420.0, "request_timeout": 300.0,
         "logprob_tol": 1e-3}


def log(msg: str) -> None:
    print(f"[node {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def gpu_count() -> int:
    """GPUs nvidia-smi lists (0 without nvidia-smi)."""
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))


def make_spec(args: argparse.Namespace, workdir: Path) -> Dict[str, Any]:
    """Everything a run needs, fixed by its first call (a --continue call reads it back)."""
    replicas = args.replicas or gpu_count()
    if replicas < 1:
        raise SystemExit("no GPU found (nvidia-smi -L): give --replicas N, or --smoke on a CPU")
    plan = parse_plan(args.plan or DEFAULT_PLAN)
    if parse_faults(args.faults) and replicas < 2:
        raise SystemExit("--faults needs at least 2 replicas (one is stopped or killed)")
    model = Path(args.model)
    if args.smoke and args.model == str(HERE.parents[0] / "vllm_gpu" / "model"):
        sys.path.insert(0, str(REPO / "tests" / "e2e" / "vllm"))
        from tiny_model import make_tiny_model  # noqa: PLC0415
        model = make_tiny_model(workdir / "tiny-model")
    if not (model / "config.json").is_file():
        raise SystemExit(f"--model {model}: no config.json there")
    vocab = int(json.loads((model / "config.json").read_text())["vocab_size"])
    wl = WorkloadSpec(conversations=args.conversations, turns=args.turns,
                      prefix_tokens=args.prefix_tokens, documents=args.documents,
                      first_user_tokens=args.first_user_tokens, user_tokens=args.user_tokens,
                      max_tokens=args.max_tokens, vocab=vocab)
    try:
        wl.validate()
    except ValueError as err:
        raise SystemExit(f"workload: {err}") from None
    if wl.last_prompt_tokens() + wl.max_tokens > args.max_model_len:
        raise SystemExit(f"a conversation's last turn needs {wl.last_prompt_tokens() + wl.max_tokens}"
                         f" tokens, over --max-model-len {args.max_model_len}")
    if args.gpu_blocks * args.block_size < args.max_model_len:
        raise SystemExit(f"--gpu-blocks {args.gpu_blocks} x --block-size {args.block_size} holds "
                         f"fewer tokens than --max-model-len {args.max_model_len}: vLLM refuses")
    cpu_bytes = int(args.cpu_gib * GIB)
    return {
        "plan": [[r, m] for r, m in plan], "replicas": replicas, "smoke": args.smoke,
        "model": str(model), "tokenizer": args.tokenizer or str(workdir / "tokenizer"),
        "vocab": vocab, "dtype": args.dtype, "block_size": args.block_size,
        "gpu_blocks": args.gpu_blocks, "max_model_len": args.max_model_len,
        "max_num_seqs": args.max_num_seqs, "gpu_memory_utilization": args.gpu_memory_utilization,
        "enforce_eager": args.enforce_eager, "base_port": args.base_port,
        "serve_args": shlex.split(args.serve_args),
        "workload": wl.__dict__, "concurrency": args.concurrency, "seed": args.seed,
        "request_timeout_s": args.request_timeout, "start_timeout_s": args.start_timeout,
        "logprob_tol": args.logprob_tol,
        "cpu_bytes_per_replica": cpu_bytes, "l1_bytes": (cpu_bytes * replicas >> 20) << 20,
        "daemon": {"binary": args.daemon, "workdir": str(workdir / "daemon"),
                   "settings": {"l1.capacity": f"{cpu_bytes * replicas >> 20}MiB",
                                "l1.slab_size": "64MiB" if cpu_bytes >= GIB else "8MiB",
                                "l2.enabled": "false",
                                "sessions.heartbeat_timeout_ms": "10000",
                                **dict(kv.split("=", 1) for kv in args.daemon_set)}},
        "prompt_tokens_per_mode": wl.prompt_tokens_total(),
        "distinct_tokens_per_mode": wl.unique_tokens(),
        "faults": fault_spec(args),
    }


def fault_spec(args: argparse.Namespace) -> Dict[str, Any]:
    """The fault phases of the run (faults.py): which, on which roles (None: every role of
    the plan, a plan that --continue extends included), and their knobs."""
    kinds = parse_faults(args.faults)
    roles = [r.strip() for r in args.fault_roles.split(",") if r.strip()] or None
    return {"kinds": kinds, "roles": roles, "kill_mode": args.fault_kill_mode,
            "kill_after_s": args.fault_kill_after_s, "window_s": args.fault_window_s,
            "kill_conversations": args.fault_kill_conversations,
            "kill_control": args.fault_kill_control,
            "keep_load": args.fault_keep_load, "first_n": args.fault_first_n,
            "settle_s": args.fault_settle_s}


def extend_plan(plan: List[List[Any]], more: List[Tuple[str, List[str]]]) -> List[List[Any]]:
    """The run's plan with the roles and modes of `more` that it lacks, appended."""
    out = [[r, list(m)] for r, m in plan]
    for role, modes in more:
        mine = next((x for x in out if x[0] == role), None)
        if mine is None:
            out.append([role, list(modes)])
        else:
            mine[1] += [m for m in modes if m not in mine[1]]
    return out


def plan_text(plan: List[List[Any]]) -> str:
    return ",".join(f"{r}:{'+'.join(m)}" for r, m in plan)


def mode_seed(spec: Dict[str, Any], mode: str) -> str:
    """A routing mode's workload seed: the same in every role, another in every mode."""
    return f"{spec['seed']}-{mode}"


class Run:
    """One call's work on the run's state (workdir/state.json: spec and finished modes)."""

    def __init__(self, args: argparse.Namespace, spec: Dict[str, Any], workdir: Path,
                 state: Dict[str, Any]) -> None:
        self.args, self.spec, self.workdir, self.state = args, spec, workdir, state
        self.out = Path(args.out)
        self.t0 = time.monotonic()
        self.lmcache, self.lmcache_blocked = lmcache_module()
        self.daemon = None
        self.env = dict(os.environ)
        if spec["smoke"]:
            self.env.setdefault("VLLM_TARGET_DEVICE", "cpu")
        for k, v in (("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1"),
                     ("VLLM_NO_USAGE_STATS", "1"), ("DO_NOT_TRACK", "1")):
            self.env.setdefault(k, v)

    # ------------------------------------------------------------------ bookkeeping

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def estimate(self, key: str, default: float) -> float:
        """The longest time a step of this kind took so far in the run (`default` before)."""
        seen = self.state.get("timings", {}).get(key, [])
        return max(seen) if seen else default

    def timed(self, key: str, seconds: float) -> None:
        self.state.setdefault("timings", {}).setdefault(key, []).append(round(seconds, 1))

    def save(self) -> None:
        (self.workdir / "state.json").write_text(json.dumps(self.state))
        full = {"spec": self.spec, "results": self.state["results"],
                "faults": self.state.get("faults", {}),
                "starts": self.state.get("starts", {}), "blocked": self.blocked(),
                "left": self.left()}
        (self.out / "node.json").write_text(json.dumps(full, indent=1))

    def blocked(self) -> Dict[str, str]:
        """Roles that did not run and why: lmcache unavailable, a role that failed."""
        out = {} if self.lmcache is not None else {"lmcache": "blocked: " + self.lmcache_blocked}
        for role, err in self.state.get("failed", {}).items():
            lines = err.strip().splitlines()
            errors = [x for x in lines if "Error" in x]
            out[role] = "failed: " + lines[0] + (f" ... {errors[-1].strip()}" if errors else "")
        return out

    def done(self, role: str, mode: str) -> bool:
        return f"{role}:{mode}" in self.state["results"]

    def faults_pending(self, role: str) -> List[str]:
        """The role's fault phases not run yet (a failed one counts as run)."""
        f = self.spec.get("faults") or {}
        if f.get("roles") is not None and role not in f["roles"]:
            return []
        return [k for k in f.get("kinds", []) if f"{role}:{k}" not in self.state.get("faults", {})]

    def left(self) -> List[str]:
        return [f"{r}:{m}" for r, modes in self.spec["plan"]
                for m in list(modes) + self.faults_pending(r)
                if (m in FAULTS or not self.done(r, m))
                and not (r == "lmcache" and self.lmcache is None)]

    # ------------------------------------------------------------------ the run

    def run(self) -> None:
        try:
            for role, modes in self.spec["plan"]:
                todo = [m for m in modes if not self.done(role, m)]
                faults = self.faults_pending(role)
                if not todo and not faults:
                    continue
                if role == "lmcache" and self.lmcache is None:
                    log(f"lmcache: blocked ({self.lmcache_blocked})")
                    continue
                first = self.estimate("mode", 60.0) if todo else self.fault_estimate(faults[0])
                need = self.estimate("start", 90.0) + first + self.estimate("stop", 15.0)
                if self.elapsed() + need > self.args.budget_s:
                    log(f"stopping before {role}: ~{need:.0f} s needed, "
                        f"{self.args.budget_s - self.elapsed():.0f} s of --budget-s left; "
                        "run again with --continue")
                    break
                try:
                    self.run_role(role, todo, faults)
                    self.state.get("failed", {}).pop(role, None)  # an earlier call's failure
                except RuntimeError as err:  # a role that cannot start: the next one runs
                    log(f"{role}: failed: {err}")
                    self.state.setdefault("failed", {})[role] = str(err)[-3000:]
        finally:
            if self.daemon is not None:
                self.daemon.stop()
                shutil.copy(self.daemon.log_path, self.out / "kvstratad.log")
            self.save()

    def start_daemon(self) -> str:
        """The node's kvstratad (started on the first kvstrata role of this call)."""
        if self.daemon is None:
            sys.path.insert(0, str(HERE.parents[0] / "vllm_gpu"))
            from daemon_ctl import DaemonCtl  # noqa: PLC0415 - needs kvstrata
            self.daemon = DaemonCtl(**self.spec["daemon"])
            self.daemon.stop()  # one left over by a call that was cut short
            log(f"kvstratad started in {self.daemon.start():.1f} s "
                f"(L1 {self.spec['daemon']['settings']['l1.capacity']})")
        return self.daemon.endpoint

    def fault_estimate(self, kind: str) -> float:
        """restart: the pre-turns, a stop, a start, a turn; kill: a mode and a start."""
        return self.estimate(f"fault_{kind}", {"restart": 150.0, "kill": 150.0}[kind])

    def run_role(self, role: str, modes: List[str], faults: Optional[List[str]] = None) -> None:
        spec = self.spec
        endpoint = self.start_daemon() if uses_daemon(role) else None
        env = dict(self.env)
        lmcache_server = None
        if role == "lmcache":  # the node's one LMCache server, as much DRAM as kvstratad's L1
            env["PYTHONPATH"] = os.pathsep.join(
                list(self.lmcache.extra_pythonpath()) + [env.get("PYTHONPATH", "")])
            env.setdefault("LMCACHE_L1_SIZE_GB", f"{spec['l1_bytes'] / GIB:g}")
            lmcache_server = self.lmcache.start_server(self.workdir / "lmcache", env)
        server = ServerSpec(python=sys.executable, model=spec["model"],
                            tokenizer=spec["tokenizer"], dtype=spec["dtype"],
                            block_size=spec["block_size"], gpu_blocks=spec["gpu_blocks"],
                            max_model_len=spec["max_model_len"],
                            max_num_seqs=spec["max_num_seqs"],
                            gpu_memory_utilization=spec["gpu_memory_utilization"],
                            enforce_eager=spec["enforce_eager"], base_port=spec["base_port"],
                            cpu=spec["smoke"], extra_args=tuple(spec["serve_args"]))
        rs = ReplicaSet(server, spec["replicas"], role, self.workdir / "logs", env)
        kvt = kv_transfers(role, spec["replicas"], spec["block_size"],
                           spec["cpu_bytes_per_replica"], endpoint, self.lmcache)
        log(f"{role}: starting {spec['replicas']} replicas")
        try:
            took = rs.start(kvt, spec["start_timeout_s"])
            self.timed("start", took)
            self.state.setdefault("starts", {})[role] = round(took, 1)
            log(f"{role}: {spec['replicas']} replicas healthy in {took:.1f} s")
            self.warm_up(rs, role)
            for mode in modes:
                need = self.estimate("mode", 60.0) + self.estimate("stop", 15.0)
                if self.elapsed() + need > self.args.budget_s:
                    log(f"stopping before {role}:{mode}: ~{need:.0f} s needed; run again "
                        "with --continue")
                    break
                self.run_mode(rs, role, mode)
            else:
                self.run_faults(rs, role, faults or [])
        finally:
            self.timed("stop", rs.stop())
            if lmcache_server is not None:
                lmcache_server.terminate()
                try:
                    lmcache_server.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    lmcache_server.kill()

    def run_faults(self, rs: ReplicaSet, role: str, faults: List[str]) -> None:
        """The role's fault phases (faults.py) in order; R is started again after a kill
        only when a later phase follows. A phase that fails (R not healthy again) is
        recorded with its error and ends the role's phases."""
        daemon = self.daemon if uses_daemon(role) else None
        runner = FaultRunner(rs, self.spec, role, SERVED_NAME, log,
                             probe=daemon_probe(daemon.endpoint) if daemon else None,
                             wait_idle=daemon.wait_idle if daemon else None,
                             uses_daemon=uses_daemon(role))
        for k, kind in enumerate(faults):
            need = self.fault_estimate(kind) + self.estimate("stop", 15.0)
            if self.elapsed() + need > self.args.budget_s:
                log(f"stopping before {role}:{kind}: ~{need:.0f} s needed; run again with "
                    "--continue")
                break
            if daemon is not None:
                daemon.wait_idle()
            t0 = time.monotonic()
            try:
                res = runner.run(kind, restart_after=k + 1 < len(faults))
            except RuntimeError as err:
                log(f"{role}:{kind}: failed: {err}")
                res = {"fault": kind, "role": role, "error": str(err)[-3000:]}
            self.timed(f"fault_{kind}", time.monotonic() - t0 + 5.0)
            self.state.setdefault("faults", {})[f"{role}:{kind}"] = res
            self.save()
            if res.get("error"):
                break

    def warm_up(self, rs: ReplicaSet, role: str) -> None:
        """Two short unique requests per replica, unmeasured: first-request costs (kernel
        JIT, a connector's first session) stay out of the first mode."""
        vocab = self.spec["workload"]["vocab"]
        sends = [(i, tokens(f"warmup/{role}/{i}/{k}", 64, vocab))
                 for i in range(len(rs.replicas)) for k in range(2)]

        async def go() -> List[Any]:
            import aiohttp  # noqa: PLC0415
            from client import complete  # noqa: PLC0415
            async with aiohttp.ClientSession() as session:
                return [await complete(session, rs.urls[i], SERVED_NAME, p, 2, i,
                                       self.spec["request_timeout_s"]) for i, p in sends]

        errors = [c.error for c in asyncio.run(go()) if c.error]
        if errors:
            raise RuntimeError(f"{role}: warm-up requests failed: {errors[0]}")

    def run_mode(self, rs: ReplicaSet, role: str, mode: str) -> None:
        from loadgen import run_conversations  # noqa: PLC0415 - needs aiohttp
        from stats import summarize  # noqa: PLC0415
        spec = self.spec
        wl = WorkloadSpec(**spec["workload"])
        convs = make_conversations(wl, mode_seed(spec, mode))
        router = Router(routing(mode), len(rs.replicas))
        if self.daemon is not None and uses_daemon(role):
            self.daemon.wait_idle()
        before = [metrics.scrape(u) for u in rs.urls]
        dbefore = metrics.daemon_counters(self.daemon.endpoint) \
            if uses_daemon(role) and self.daemon is not None else None
        log(f"{role}:{mode}: {len(convs)} conversations x {wl.turns} turns, "
            f"{spec['concurrency']} in flight")
        t0 = time.monotonic()
        with gauges.Sampler(rs.urls) as sampler:
            res = asyncio.run(run_conversations(rs.urls, SERVED_NAME, router, convs,
                                                spec["concurrency"], wl.max_tokens,
                                                spec["request_timeout_s"]))
        res["gauges"] = sampler.series
        self.timed("mode", time.monotonic() - t0 + 5.0)
        if uses_daemon(role) and self.daemon is not None:
            self.daemon.wait_idle()
        after = [metrics.scrape(u) for u in rs.urls]
        per_replica = [metrics.delta(b, a) for b, a in zip(before, after)]
        res["metrics_per_replica"] = per_replica
        res["metrics"] = metrics.total(per_replica)
        if dbefore is not None:
            res["daemon"] = metrics.delta(dbefore, metrics.daemon_counters(self.daemon.endpoint))
        res["replicas_alive"] = rs.alive()
        res["seed"] = mode_seed(spec, mode)
        res["summary"] = summarize(res)
        self.state["results"][f"{role}:{mode}"] = res
        self.save()
        s = res["summary"]
        log(f"{role}:{mode}: {s['wall_s']} s, {s['req_per_s']} req/s, {s['prompt_tok_per_s']} "
            f"prompt tok/s, TTFT turn 1 p50 {s['ttft_turn1_ms']['p50']} ms, later p50 "
            f"{s['ttft_later_ms']['p50']} ms, cached {s['cached_frac']}, errors {s['errors']}")


def collect_logs(workdir: Path, out: Path, lines: int = 120) -> None:
    """The tail of every replica log (and the LMCache server's) of the run, in one file."""
    parts = []
    for f in sorted((workdir / "logs").glob("*.log")) + sorted(workdir.glob("lmcache/*.log")):
        tail = f.read_text(errors="replace").splitlines()[-lines:]
        parts.append(f"===== {f.name} (last {len(tail)} lines)\n" + "\n".join(tail))
    (out / "replica_logs.txt").write_text("\n\n".join(parts) + "\n")


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--workdir", default="/tmp/kvs-node-bench")
    ap.add_argument("--continue", dest="cont", action="store_true",
                    help="keep --workdir: run what an earlier call left (its spec applies) "
                         "and report everything")
    ap.add_argument("--budget-s", type=float, default=560.0,
                    help="stop before a role or mode that would end after this many seconds "
                         "(a device call runs 600 s at most); --continue does the rest")
    ap.add_argument("--smoke", action="store_true",
                    help="a CPU run with vLLM's CPU build and a tiny model: " + " ".join(
                        f"--{k.replace('_', '-')} {v}" for k, v in SMOKE.items()))
    ap.add_argument("--plan",
                    help=f"ROLE:MODE[+MODE...] items in order (default: {DEFAULT_PLAN}); "
                         "roles none, native, kvstrata, kvstrata_inline, kvstrata_async, lmcache; modes rr, least, sticky; "
                         "MODE*N runs a mode N times (sticky, sticky.2, ...: conversations of their own). "
                         "With --continue: what to add to the run's plan (e.g. "
                         "lmcache:rr+sticky after a finished default plan)")
    ap.add_argument("--replicas", type=int, default=0,
                    help="vllm serve replicas, one per GPU (default: the GPUs nvidia-smi lists)")
    ap.add_argument("--model", default=str(HERE.parents[0] / "vllm_gpu" / "model"),
                    help="model directory (config.json; weights are dummy)")
    ap.add_argument("--tokenizer",
                    help="tokenizer directory (default: one built into --workdir by "
                         "tokenizer.py over the model's vocabulary)")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--gpu-blocks", type=int, default=3072,
                    help="--num-gpu-blocks-override of every replica (3072 x 16 = 48K tokens, "
                         "6 GiB of Llama-3.1-8B KV): the workload's KV does not fit")
    ap.add_argument("--max-model-len", type=int, default=16384)
    ap.add_argument("--max-num-seqs", type=int, default=64)
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.85)
    ap.add_argument("--enforce-eager", action=argparse.BooleanOptionalAction, default=True,
                    help="no CUDA graphs / torch.compile (default on: ~1 min per server start)")
    ap.add_argument("--base-port", type=int, default=8100)
    ap.add_argument("--serve-args", default="",
                    help="more arguments for every replica's `vllm serve`, one string "
                         "given with '=', e.g. --serve-args='--max-num-batched-tokens 8192'")
    ap.add_argument("--conversations", type=int, default=64)
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--prefix-tokens", type=int, default=2048,
                    help="the shared prefix (a system prompt / document) of every conversation")
    ap.add_argument("--documents", type=int, default=1,
                    help="distinct shared prefixes (conversation i reads document i %% N)")
    ap.add_argument("--first-user-tokens", type=int, default=2048)
    ap.add_argument("--user-tokens", type=int, default=1024, help="each later user message")
    ap.add_argument("--max-tokens", type=int, default=16, help="answer tokens of every turn")
    ap.add_argument("--concurrency", type=int, default=32, help="requests in flight")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cpu-gib", type=float, default=32.0,
                    help="host KV cache per replica: native's cpu_bytes_to_use; kvstratad's L1 "
                         "is replicas x this (the same host memory)")
    ap.add_argument("--daemon", default=os.environ.get(
        "KVSTRATA_DAEMON", str(REPO / ".bundle" / "bin" / "kvstratad")))
    ap.add_argument("--daemon-set", action="append", default=[], metavar="KEY=VALUE",
                    help="a kvstratad setting (repeatable), e.g. l1.slab_size=32MiB")
    ap.add_argument("--request-timeout", type=float, default=120.0)
    ap.add_argument("--start-timeout", type=float, default=240.0,
                    help="seconds for a role's replicas to answer /health")
    ap.add_argument("--logprob-tol", type=float, default=0.02,
                    help="first-token logprob difference counted as a mismatch (batches "
                         "differ between runs, so bf16 logits do too)")
    ap.add_argument("--faults", default="",
                    help="fault phases after each role's modes (faults.py, issue 41 item 3): "
                         "restart (stop the last replica, start it again, send it the next "
                         "turn of conversations that ran elsewhere: time to first hit) and/or "
                         "kill (SIGKILL to the last replica during its loads: the others' "
                         "TTFT around it, the daemon's cleanup); default none. With "
                         "--continue: adds them to the run")
    ap.add_argument("--fault-roles", default="",
                    help="roles that run the fault phases, comma-separated (default: every "
                         "role of the plan; none is the control)")
    ap.add_argument("--fault-kill-mode", default="sticky", choices=("rr", "least", "sticky"),
                    help="routing of the kill phase's workload")
    ap.add_argument("--fault-kill-after-s", type=float, default=0.0,
                    help="the kill comes once every first turn of the kill phase is done and "
                         "--fault-window-s more have passed, at least this long after its "
                         "first request, and once the victim has a later turn in flight "
                         "(<= 5 s more)")
    ap.add_argument("--fault-window-s", type=float, default=10.0,
                    help="TTFT windows before and after the kill")
    ap.add_argument("--fault-kill-control", action=argparse.BooleanOptionalAction, default=False,
                    help="run the kill phase's workload once without the kill first (its own "
                         "seed) and judge the others' TTFT after the kill against the control's "
                         "in the same window, not against the window before the kill")
    ap.add_argument("--fault-kill-conversations", type=int, default=0,
                    help="the kill phase's conversations (default: --conversations); more keep "
                         "a fast node busy past the windows, e.g. 256 on four H200s")
    ap.add_argument("--fault-keep-load", action=argparse.BooleanOptionalAction, default=True,
                    help="after the kill, requests in flight drop to the live replicas' share "
                         "of --concurrency (each other replica keeps its load)")
    ap.add_argument("--fault-first-n", type=int, default=0,
                    help="restart: the cached fraction over the first N requests to the "
                         "restarted replica (default: --concurrency)")
    ap.add_argument("--fault-settle-s", type=float, default=30.0,
                    help="kill: watch the daemon at most this long after the kill for the "
                         "dead engine's sessions and fenced bytes to go")
    args = ap.parse_args(argv)
    if args.smoke:  # the smoke values where the command line gives none
        ap.set_defaults(**SMOKE)
        args = ap.parse_args(argv)
    for kv in args.daemon_set:
        if "=" not in kv:
            ap.error(f"--daemon-set {kv!r}: write KEY=VALUE")
    for name in ("concurrency", "max_num_seqs", "block_size", "gpu_blocks", "max_model_len"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.replicas < 0 or args.cpu_gib <= 0 or not 0 < args.gpu_memory_utilization <= 1:
        ap.error("--replicas >= 0, --cpu-gib > 0 and 0 < --gpu-memory-utilization <= 1")
    try:
        parse_plan(args.plan or DEFAULT_PLAN)
        kinds = parse_faults(args.faults)
    except ValueError as err:
        ap.error(str(err))
    from roles import ROLES  # noqa: PLC0415
    for r in (x.strip() for x in args.fault_roles.split(",") if x.strip()):
        if r not in ROLES:
            ap.error(f"--fault-roles: unknown role {r!r}")
    if kinds and args.replicas == 1:
        ap.error("--faults needs at least 2 replicas (one is stopped or killed)")
    if "restart" in kinds and args.turns < 2:
        ap.error("--faults restart needs --turns >= 2 (the last turn goes to the restarted "
                 "replica)")
    return args


def main() -> int:
    args = parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    workdir = Path(args.workdir)
    state_path = workdir / "state.json"
    if args.cont and state_path.is_file():
        state = json.loads(state_path.read_text())
        spec = state["spec"]
        log(f"--continue: the first call's spec applies; done so far: "
            f"{', '.join(state['results']) or 'nothing'}")
        if args.plan:
            spec["plan"] = extend_plan(spec["plan"], parse_plan(args.plan))
            log(f"plan now: {plan_text(spec['plan'])}")
        if args.faults:  # fault phases added to (or changed in) the run
            spec["faults"] = fault_spec(args)
            log(f"faults now: {','.join(spec['faults']['kinds']) or 'none'} on "
                f"{','.join(spec['faults']['roles'] or ['every role of the plan'])}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
        workdir.mkdir(parents=True)
        spec = make_spec(args, workdir)
        state = {"spec": spec, "results": {}}
    if not (Path(spec["tokenizer"]) / "tokenizer.json").is_file():
        from tokenizer import for_model  # noqa: PLC0415 - needs the tokenizers package
        t0 = time.monotonic()
        for_model(Path(spec["model"]), Path(spec["tokenizer"]))
        log(f"tokenizer built in {time.monotonic() - t0:.1f} s: {spec['tokenizer']}")
    run = Run(args, spec, workdir, state)
    try:
        run.run()
    finally:
        collect_logs(workdir, out)
        text = render(spec, state["results"], state.get("starts", {}), run.blocked(),
                      run.left())
        text = "\n".join([text] + render_faults(state.get("faults", {})))
        (out / "summary.txt").write_text(text + "\n")
        print(text, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
