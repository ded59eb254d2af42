#!/usr/bin/env python3
"""Slow disk: L2 hits on a disk throttled on purpose against recomputing, 8 in flight
(issue 43: "hit TTFT p99 <= recompute p99 under 8 concurrent requests").

    python3 bench/slow_disk/run.py --out DIR --rates 4MB,0 [--cpu | --model M] [options]

Two `vllm serve` replicas (bench/node/replicas.py) up at once: `none` (no connector: the
recompute reference) and `kvstrata` (KVStrataConnector, load planner on, on one kvstratad
whose L2 sits in --workdir: it must be on the disk the throttle names). Per rate (a row),
prompts unique to the row, --waves x --concurrency of them:
  1. fill: the kvstrata replica computes them a wave at a time (stored: L1 and L2), the
     daemon going idle (L2 written) after each, then the replica's own prefix cache is reset;
  2. the daemon restarts (L1 empty, L2 kept) and moves into a cgroup that throttles the
     disk to the rate (throttle.py; 0: the group without a limit); the replica reconnects
     (a few unique short prompts); fio and dd read the throttled disk from the same group;
  3. each wave: the wave's prompts to `none` (recompute), then the same prompts to
     `kvstrata` (each hit is in L2 only), --concurrency in flight, sent at once.
  4. (--own nostore|store) fresh prompts of the same length to `kvstrata`, nothing stored
     (kv_transfer_params max_offload_tokens 0) or stored as any miss is: the same process
     recomputing, the reference that the two processes' speeds do not move (the target's
     reference stays `none`).
Reported per row: TTFT p50/p90/p99 of the hits and of the recomputes (all waves, and waves
after the first: the planner has measured the disk by then), the cached tokens, the load
planner's decisions (the replica's vllm:kvstrata_plan_* per wave; the daemon's GetStats
client_counters and `kvstrata stats` at the row's end), L2 bytes read, the disk figures.
Results: DIR/slow_disk.json, DIR/summary.txt, DIR/*.log, the connector trace.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, Dict, List, Optional

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path[:0] = [str(HERE), str(REPO / "bench" / "node"), str(REPO / "bench" / "vllm_gpu")]

import metrics  # noqa: E402
import throttle  # noqa: E402
from replicas import SERVED_NAME, ReplicaSet, ServerSpec  # noqa: E402
from summary import render  # noqa: E402

MIB = 1 << 20
# --cpu: vLLM's CPU build; a small Llama (random weights) whose prefill of 1K tokens takes
# about as long on one core as reading its KV from an unthrottled disk takes a fraction of.
CPU = {"dtype": "float32",
       "block_size": 32, "gpu_blocks": 512, "max_model_len": 2048, "prompt_tokens": 1024,
       "max_num_seqs": 16, "gpu_memory_utilization": 0.1, "l1": "1GiB"}
# The tree's client and connector (client/python, connector_vllm) go in front of the venv's
# installed copies where the tree has its generated files (a built checkout); elsewhere (the
# GPU machine's bundle) the installed packages serve.
TREE_PATHS = [REPO / "client" / "python", REPO / "connector_vllm"]
USE_TREE = (REPO / "client" / "python" / "kvstrata" / "_generated" / "kvstrata_v1.desc").is_file()
if USE_TREE:
    sys.path[:0] = [str(p) for p in TREE_PATHS]


def log(msg: str) -> None:
    print(f"[slow-disk {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def prompt(seed: str, n: int, vocab: int) -> List[int]:
    rng = random.Random(seed)
    return [rng.randrange(4, vocab) for _ in range(n)]


# kv_transfer_params of the KVStrata replica's own recomputes: nothing stored (no disk writes
# beside the hits' reads), the connector's lookup as for any request.
NO_STORE = {"max_offload_tokens": 0}


async def send_all(url: str, prompts: List[List[int]], concurrency: int, max_tokens: int,
                   timeout_s: float, kv_transfer_params: Optional[Dict[str, Any]] = None
                   ) -> List[Dict[str, Any]]:
    """Every prompt, `concurrency` in flight (all at once when there are that many); one
    record per prompt (TTFT, cached tokens, error)."""
    import aiohttp  # noqa: PLC0415
    from client import complete  # noqa: PLC0415
    sem = asyncio.Semaphore(concurrency)

    async def one(session: Any, i: int, p: List[int]) -> Dict[str, Any]:
        async with sem:
            c = await complete(session, url, SERVED_NAME, p, max_tokens, 0, timeout_s,
                               kv_transfer_params)
        return dict(c.to_json(), index=i, token_ids=c.token_ids[:4])

    async with aiohttp.ClientSession() as session:
        return list(await asyncio.gather(*(one(session, i, p) for i, p in enumerate(prompts))))


def post(url: str, timeout_s: float = 30.0) -> Dict[str, Any]:
    req = urllib.request.Request(url, data=b"", method="POST")
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:
        return json.loads(resp.read() or b"{}")


def reset_prefix_cache(url: str, timeout_s: float = 30.0) -> None:
    """The replica's own prefix cache emptied (vLLM's dev API; refused while blocks are
    held: retried)."""
    t0 = time.monotonic()
    while not post(f"{url}/reset_prefix_cache").get("success"):
        if time.monotonic() - t0 > timeout_s:
            raise RuntimeError(f"{url}: /reset_prefix_cache refused for {timeout_s:.0f} s")
        time.sleep(0.2)


def daemon_stats(endpoint: str, cli: Optional[str]) -> Dict[str, Any]:
    """GetStats counters, client_counters (the planner's totals), tiers' bytes; and the
    text of `kvstrata stats` when the CLI is there."""
    import kvstrata  # noqa: PLC0415
    out: Dict[str, Any] = {}
    with kvstrata.Client(endpoint, timeout=5.0) as client:
        s = client.get_stats()
        out["counters"] = {c.name: int(c.value) for c in s.counters}
        out["client_counters"] = {c.name: int(c.value)
                                  for c in getattr(s, "client_counters", [])}
        out["tiers"] = {t.name: {f: int(getattr(t, f)) for f in
                                 ("hits", "misses", "blocks", "read_bytes", "write_bytes")
                                 if hasattr(t, f)} for t in client.list_tiers().tiers}
    if cli and Path(cli).is_file():
        res = subprocess.run([cli, f"--endpoint={endpoint}", "stats"], capture_output=True,
                             text=True, timeout=30)
        out["cli_stats"] = res.stdout + res.stderr
    return out


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.out, self.workdir = Path(args.out), Path(args.workdir)
        self.result: Dict[str, Any] = {"args": vars(args), "rows": {}}
        self.daemon: Any = None
        self.sets: Dict[str, ReplicaSet] = {}
        self.th: Optional[throttle.Throttle] = None
        self.vocab = 0
        self.model_dir = Path()
        self.nreq = 0  # reconnect prompts sent (unique seeds)

    def save(self) -> None:
        (self.out / "slow_disk.json").write_text(json.dumps(self.result, indent=1))

    # ------------------------------------------------------------------ set-up

    def model(self) -> Path:
        """--model (dummy weights; the node bench's Llama-3.1-8B geometry by default), or
        with --cpu a small random Llama made by tests/e2e/vllm/tiny_model.py."""
        a = self.args
        if a.model or not a.cpu:
            return Path(a.model or REPO / "bench" / "vllm_gpu" / "model")
        sys.path.insert(0, str(REPO / "tests" / "e2e" / "vllm"))
        from tiny_model import make_tiny_model  # noqa: PLC0415
        name = f"llama-L{a.layers}-H{a.hidden}-kv{a.kv_heads}"
        return make_tiny_model(Path(a.model_cache) / name, num_layers=a.layers, hidden=a.hidden,
                               heads=a.heads, kv_heads=a.kv_heads, max_len=a.max_model_len)

    def tokenizer(self, model: Path) -> Path:
        """The model's own tokenizer files, else one built over its vocabulary
        (bench/node/tokenizer.py): prompts go as token ids."""
        if (model / "tokenizer.json").is_file():
            return model
        from tokenizer import for_model  # noqa: PLC0415
        return for_model(model, self.workdir / "tokenizer")

    def start(self) -> None:
        a = self.args
        model = self.model_dir = self.model()
        tok = self.tokenizer(model)
        self.vocab = int(json.loads((model / "config.json").read_text())["vocab_size"])
        from daemon_ctl import DaemonCtl  # noqa: PLC0415
        settings = {"l1.capacity": a.l1, "l1.slab_size": "8MiB", "l2.enabled": "true",
                    "l2.path": str(self.workdir / "l2"), "l2.capacity": a.l2,
                    "l2.write_queue_blocks": "32768", "sessions.heartbeat_timeout_ms": "10000",
                    **dict(kv.split("=", 1) for kv in a.daemon_set)}
        self.daemon = DaemonCtl(a.daemon, str(self.workdir / "daemon"), settings)
        self.daemon.stop()
        log(f"kvstratad started in {self.daemon.start():.1f} s")
        env = dict(os.environ, VLLM_SERVER_DEV_MODE="1", HF_HUB_OFFLINE="1",
                   TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1",
                   KVSTRATA_VLLM_TRACE=str(self.workdir / "trace.jsonl"))
        if a.cpu:
            env["VLLM_TARGET_DEVICE"] = "cpu"
        if USE_TREE:
            env["PYTHONPATH"] = os.pathsep.join([str(p) for p in TREE_PATHS]
                                                + [env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        self.result["pythonpath"] = env.get("PYTHONPATH", "")
        kvt = {"kv_connector": "KVStrataConnector", "kv_connector_module_path": "kvstrata_vllm",
               "kv_role": "kv_both", "kv_load_failure_policy": "recompute",
               "kv_connector_extra_config": {"endpoint": self.daemon.endpoint,
                                             "load_planner": a.load_planner}}
        t0 = time.monotonic()
        kv: Dict[str, Any] = {}
        for k, (role, cfg) in enumerate((("none", None), ("kvstrata", kvt))):
            spec = ServerSpec(python=sys.executable, model=str(model), tokenizer=str(tok),
                              dtype=a.dtype, block_size=a.block_size, gpu_blocks=a.gpu_blocks,
                              max_model_len=a.max_model_len, max_num_seqs=a.max_num_seqs,
                              gpu_memory_utilization=a.gpu_memory_utilization,
                              enforce_eager=True, base_port=a.base_port + k, cpu=a.cpu)
            self.sets[role] = ReplicaSet(spec, 1, role, self.workdir / "logs", env)
            kv[role] = cfg
        # Both at once (one start's wait covers the other's), each replica 0 of its set:
        # the same core (VLLM_CPU_OMP_THREADS_BIND=0) on vLLM's CPU build.
        import threading  # noqa: PLC0415
        errs: List[BaseException] = []

        def go(role: str) -> None:
            try:
                self.sets[role].start([kv[role]], a.start_timeout)
            except BaseException as err:  # noqa: BLE001 - reported below
                errs.append(err)
        threads = [threading.Thread(target=go, args=(r,)) for r in self.sets]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errs:
            raise RuntimeError(f"a replica did not start: {errs[0]}")
        self.result["start_s"] = round(time.monotonic() - t0, 1)
        log(f"replicas none and kvstrata up in {self.result['start_s']} s")
        disk = throttle.disk_of(self.workdir)
        self.th = throttle.Throttle(f"kvs-slow-disk-{os.getpid()}", disk, 0)
        self.result["disk"] = {"dev": disk, "cgroup": self.th.v, "l2_dir": str(self.workdir / "l2")}
        # First-request costs out of the rows; the kvstrata replica's planner sees steps.
        for role in ("none", "kvstrata"):
            self.send(role, [prompt(f"warm/{role}/{i}", a.prompt_tokens, self.vocab)
                             for i in range(a.concurrency)])

    def url(self, role: str) -> str:
        return self.sets[role].urls[0]

    def send(self, role: str, prompts: List[List[int]], max_tokens: int = 0,
             kv_transfer_params: Optional[Dict[str, Any]] = None) -> List[Dict[str, Any]]:
        recs = asyncio.run(send_all(self.url(role), prompts, self.args.concurrency,
                                    max_tokens or self.args.max_tokens,
                                    self.args.request_timeout, kv_transfer_params))
        bad = [r["error"] for r in recs if r.get("error")]
        if bad:
            log(f"{role}: {len(bad)} failed: {bad[0]}")
        return recs

    def reconnect(self, expected: Dict[str, Any], timeout_s: float = 60.0) -> float:
        """After the daemon's restart: unique short prompts until the replica's sessions are
        back (its scheduler and worker reconnect on their first failing call)."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout_s:
            self.nreq += 1
            self.send("kvstrata", [prompt(f"reconnect/{self.nreq}", 64, self.vocab)], 2)
            if self.daemon.wait_sessions(expected, timeout_s=1.0) < 1.0:
                return time.monotonic() - t0
        raise RuntimeError(f"the replica did not reconnect in {timeout_s:.0f} s")

    # ------------------------------------------------------------------ one row

    def row(self, rate_text: str) -> Dict[str, Any]:
        a, th = self.args, self.th
        assert th is not None
        bps = throttle.parse_rate(rate_text)
        waves = [[prompt(f"{a.seed}/{rate_text}/{w}/{i}", a.prompt_tokens, self.vocab)
                  for i in range(a.concurrency)] for w in range(a.waves)]
        fresh = [[prompt(f"{a.seed}/{rate_text}/{w}/{i}/own", a.prompt_tokens, self.vocab)
                  for i in range(a.concurrency)] for w in range(a.waves)]
        row: Dict[str, Any] = {"rate": rate_text, "bps": bps}
        # 1. fill, unthrottled (the daemon restarted out of the group: a fresh L1).
        expected = self.daemon.registered()
        self.daemon.restart()
        row["reconnect_fill_s"] = round(self.reconnect(expected), 2)
        # A wave at a time, each written to L2 before the next: L1 (--l1, more than a wave's
        # KV) then never evicts a block whose write has not run (past evicted_copy_bytes such
        # a write is shed, and the row's hits would be misses).
        t0 = time.monotonic()
        fill, idle = [], 0.0
        for wave in waves:
            fill += self.send("kvstrata", wave, 1)
            idle += self.daemon.wait_idle(timeout_s=300.0)
        row["fill_idle_s"] = round(idle, 1)
        row["fill_s"] = round(time.monotonic() - t0, 1)
        row["fill_errors"] = sum(1 for r in fill if r.get("error"))
        reset_prefix_cache(self.url("kvstrata"))
        # 2. restart into the throttle.
        expected = self.daemon.registered()
        self.daemon.stop()
        th.set_rate(bps)
        row["daemon_start_s"] = round(self.daemon.start(), 2)
        th.add(self.daemon.pid())
        row["cgroup_rules"] = th.rules()
        row["reconnect_s"] = round(self.reconnect(expected), 2)
        l2 = daemon_stats(self.daemon.endpoint, None)["tiers"].get("l2", {})
        row["l2_blocks_before"] = l2.get("blocks")
        unit = a.block_size * self.kv_bytes_per_token()
        size = max(8 * MIB, min(256 * MIB, bps * 3 if bps else 256 * MIB))
        row["fio"] = throttle.fio_read(th, self.workdir, size, unit, 4)
        row["dd"] = throttle.dd_read(th, self.workdir, size, unit)
        log(f"row {rate_text}: {th.rules()}; fio {row['fio'].get('MB_s')} MB/s, dd "
            f"{row['dd'].get('MB_s')} MB/s ({unit >> 10} KiB requests); L2 holds "
            f"{row['l2_blocks_before']} blocks")
        # 3. the waves.
        row["waves"] = []
        stats0 = daemon_stats(self.daemon.endpoint, None)
        for w, wave in enumerate(waves):
            rec = self.send("none", wave)
            before = metrics.scrape(self.url("kvstrata"))
            t0 = time.monotonic()
            hit = self.send("kvstrata", wave)
            wall = time.monotonic() - t0
            plan = metrics.delta(before, metrics.scrape(self.url("kvstrata")))
            # The same process recomputing prompts it never saw (nothing stored): the
            # reference without the two processes' difference in speed.
            own = [] if a.own == "off" else self.send(
                "kvstrata", fresh[w], kv_transfer_params=NO_STORE if a.own == "nostore" else None)
            row["waves"].append({"recompute": rec, "hit": hit, "hit_wall_s": round(wall, 2),
                                 "own_recompute": own, "metrics": plan})
            log(f"row {rate_text} wave {w}: recompute max TTFT "
                f"{max((r['ttft_s'] or 0) for r in rec) * 1e3:.0f} ms, hit max "
                f"{max((r['ttft_s'] or 0) for r in hit) * 1e3:.0f} ms, own recompute max "
                f"{max([(r['ttft_s'] or 0) for r in own] or [0]) * 1e3:.0f} ms, plan "
                f"{ {k[18:]: v for k, v in (plan or {}).items() if 'plan_' in k and v} }")
            self.save_row(rate_text, row)
        time.sleep(4.0)  # a heartbeat (~3 s) carries the planner's last totals
        stats1 = daemon_stats(self.daemon.endpoint, a.cli)
        row["daemon_stats_after"] = stats1
        row["l2_read_bytes"] = (stats1["tiers"].get("l2", {}).get("read_bytes", 0)
                                - stats0["tiers"].get("l2", {}).get("read_bytes", 0))
        th.set_rate(0)
        return row

    def save_row(self, rate: str, row: Dict[str, Any]) -> None:
        self.result["rows"][rate] = row
        self.save()

    def kv_bytes_per_token(self) -> int:
        cfg = json.loads((self.model_dir / "config.json").read_text())
        heads = cfg["num_attention_heads"]
        head_dim = cfg.get("head_dim") or cfg["hidden_size"] // heads
        width = 4 if self.args.dtype == "float32" else 2
        return 2 * cfg["num_hidden_layers"] * cfg["num_key_value_heads"] * head_dim * width

    def stop(self) -> None:
        for rs in self.sets.values():
            rs.stop()
        if self.daemon is not None:
            self.daemon.stop()
            shutil.copy(self.daemon.log_path, self.out / "kvstratad.log")
        if self.th is not None:
            self.th.remove()
        for f in sorted((self.workdir / "logs").glob("*.log")):
            tail = f.read_text(errors="replace").splitlines()[-150:]
            (self.out / f.name).write_text("\n".join(tail) + "\n")
        trace = self.workdir / "trace.jsonl"
        if trace.is_file():
            shutil.copy(trace, self.out / "trace.jsonl")


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--workdir", default="/var/tmp/kvs-slow-disk",
                    help="the daemon's L2 and the probe files: on the disk to throttle")
    ap.add_argument("--rates", default="4MB,0",
                    help="disk rates, one row each (bytes/s each way: 4MB, 512KB, 1GB; 0: "
                         "no limit)")
    ap.add_argument("--cpu", action="store_true",
                    help="vLLM's CPU build and a small random Llama: " + " ".join(
                        f"--{k.replace('_', '-')} {v}" for k, v in CPU.items()))
    ap.add_argument("--model", default="",
                    help="model directory (config.json; dummy weights); default: "
                         "bench/vllm_gpu/model (Llama-3.1-8B's geometry), with --cpu a small "
                         "random Llama made by tests/e2e/vllm/tiny_model.py (--layers ...)")
    ap.add_argument("--model-cache", default="/var/tmp/kvs-slow-disk-models")
    ap.add_argument("--layers", type=int, default=8, help="--cpu's model")
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--gpu-blocks", type=int, default=4096)
    ap.add_argument("--max-model-len", type=int, default=16384)
    ap.add_argument("--max-num-seqs", type=int, default=64)
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.4,
                    help="each replica's share: both run on GPU 0")
    ap.add_argument("--base-port", type=int, default=8200)
    ap.add_argument("--prompt-tokens", type=int, default=8192,
                    help="every prompt's length (its whole blocks are the hit)")
    ap.add_argument("--concurrency", type=int, default=8, help="requests in flight")
    ap.add_argument("--waves", type=int, default=3,
                    help="rounds of --concurrency prompts per row (the first prices an "
                         "unmeasured disk)")
    ap.add_argument("--own", default="nostore", choices=("nostore", "store", "off"),
                    help="each wave also sends fresh prompts of the same length to the "
                         "KVStrata replica (its own recompute: the reference free of the two "
                         "processes' speeds): nothing stored (nostore), or stored as any miss "
                         "is (store: what recomputing costs an engine with the cache); off: not")
    ap.add_argument("--max-tokens", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--load-planner", default="on", choices=("on", "off", "auto"))
    ap.add_argument("--l1", default="16GiB",
                    help="kvstratad's L1 (emptied by each restart): more than a wave's KV "
                         "(8 x 8K tokens of Llama-3.1-8B: 8 GiB)")
    ap.add_argument("--l2", default="40GiB")
    ap.add_argument("--daemon", default=os.environ.get(
        "KVSTRATA_DAEMON", str(REPO / ".bundle" / "bin" / "kvstratad")))
    ap.add_argument("--cli", default=os.environ.get(
        "KVSTRATA_CLI", str(REPO / ".bundle" / "bin" / "kvstrata")),
                    help="the kvstrata CLI (`kvstrata stats` at each row's end)")
    ap.add_argument("--daemon-set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--request-timeout", type=float, default=300.0)
    ap.add_argument("--start-timeout", type=float, default=420.0)
    args = ap.parse_args(argv)
    if args.cpu:
        ap.set_defaults(**CPU)
        args = ap.parse_args(argv)
    return args


def main() -> int:
    args = parse_args()
    why = throttle.available()
    if why:
        raise SystemExit(f"slow disk: {why}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    workdir = Path(args.workdir)
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    bench = Bench(args)
    try:
        bench.start()
        for rate in (r.strip() for r in args.rates.split(",") if r.strip()):
            bench.save_row(rate, bench.row(rate))
    finally:
        bench.stop()
        bench.save()
        text = render(bench.result)
        (out / "summary.txt").write_text(text + "\n")
        print(text, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
