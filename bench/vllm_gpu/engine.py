#!/usr/bin/env python3
"""One real vLLM engine of the GPU benchmark, in its own process (run.py starts it).

    python3 engine.py --role none|native|kvstrata|kvstrata_async|kvstrata_batch|kvstrata_b \
        --spec spec.json --out role.json

Roles (every engine: the same dummy Llama-3.1-8B, bf16, block 16, CUDA graphs and
torch.compile on, the same GPU KV budget, greedy sampling):
  none        no connector: recompute TTFT, the users rounds, the reference outputs
  native      vLLM's OffloadingConnector (CPU): cold + hit TTFT, the users rounds
  kvstrata    KVStrataConnector: cold + L1 hit TTFT, the users rounds
  kvstrata_async, kvstrata_batch  the same phases as kvstrata, each in its own namespace:
              load_mode=async; a daemon with gpu.copy_strategy=batch (spec["role_daemon"]:
              run.py restarts the daemon with those settings before the role)
  kvstrata_b  KVStrataConnector in a second, fresh engine process: cross-instance hits,
              then L2 hits after daemon restarts, then the daemon killed during a load;
              with tp > 1 last "one rank misses" (tp_rank 1's namespace cleared; the
              `none` role computes its reference prompt)
  noop, noop_link, noop_reg  controls (noop_connector.py): a connector doing nothing; with
              KVStrataConnector's daemon sessions idle; and the KV cache registered too
A suffix .N (kvstrata.2) runs a role again in another engine process.
Results go to --out as JSON, written after every phase (a run cut short keeps what it did).

With spec["tp"] > 1 every role runs tensor-parallel over that many GPUs (vLLM's
multiprocessing executor, one worker process a rank; num_gpu_blocks_override is per rank).
NVLink multicast stays off (parallel_env). VLLM_WORKER_MULTIPROC_METHOD is left to vLLM:
0.26 forks its processes unless CUDA is initialised in the forking one, and then switches to
spawn by itself (_maybe_force_spawn); this script imports no torch of its own and keeps its
work under the __main__ guard that spawn needs.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import cpu_probe  # noqa: E402
from engine_stats import pct, summarize  # noqa: E402
import kvstrata  # noqa: E402
from daemon_ctl import DaemonCtl  # noqa: E402


def log(msg: str) -> None:
    print(f"[engine {time.strftime('%H:%M:%S')}] {msg}", flush=True)


VOCAB = 128256

# Tensor-parallel engines on the lent multi-GPU machines: NVLink multicast must stay off (a
# multicast object can take the host's GPUs out of service), in NCCL, in PyTorch's symmetric
# memory and in NVSHMEM; vLLM's torch-symmetric-memory all-reduce is not used (it
# rendezvouses multicast buffers). vLLM's custom all-reduce (CUDA IPC) and NCCL remain.
# vLLM 0.26 sets none of these itself (and needs no NCCL_CUMEM_ENABLE).
TP_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
          "NVSHMEM_DISABLE_NVLS": "1", "VLLM_ALLREDUCE_USE_SYMM_MEM": "0"}


def parallel_env(tp: int) -> None:
    """Before vLLM is imported (its engine-core and worker processes inherit it)."""
    if tp > 1:
        os.environ.update(TP_ENV)
        log(f"tensor parallel {tp}: " + " ".join(f"{k}={v}" for k, v in TP_ENV.items()))


def parallel_args(tp: int) -> Dict[str, Any]:
    """vllm.LLM arguments of a tensor-parallel engine ({} at 1: the call stays as it was)."""
    return {"tensor_parallel_size": tp, "distributed_executor_backend": "mp"} if tp > 1 else {}


def prompt(seed: int, n: int) -> List[int]:
    """n random token ids (a unique, reproducible prompt)."""
    rng = random.Random(seed)
    return [rng.randrange(min(1000, VOCAB // 4), VOCAB - 1) for _ in range(n)]


# kvstrata_async: the connector as before layer-wise loads (every load before the request is
# scheduled), in its own namespace (another salt) so that it shares nothing with `kvstrata`.
# kvstrata_batch: the connector as in `kvstrata`; its daemon runs with the role's own settings
# (spec["role_daemon"], e.g. gpu.copy_strategy=batch), also in a namespace of its own.
ASYNC_EXTRA = {"kvstrata_async": {"load_mode": "async", "namespace": {"salt": "async-role"}},
               "kvstrata_batch": {"namespace": {"salt": "batch-role"}}}


def role_daemon(spec: Dict[str, Any], role: str) -> Dict[str, Any]:
    """DaemonCtl arguments of a role: the run's daemon with the role's own settings on top
    (spec["role_daemon"][role]; run.py has restarted the daemon with them)."""
    d = dict(spec["daemon"])
    d["settings"] = {**d["settings"], **spec.get("role_daemon", {}).get(role, {})}
    return d

# Control roles (noop_connector.py): a connector that does nothing; with KVStrataConnector's
# daemon sessions held idle; and with the GPU KV cache registered with the daemon too.
NOOP_LINK = {"noop": None, "noop_link": "session", "noop_reg": "register"}


class Bench:
    def __init__(self, role: str, spec: Dict[str, Any], out: Path) -> None:
        self.role, self.spec, self.out = role, spec, out
        base = role.split(".")[0]  # "kvstrata.2": the kvstrata role in another engine process
        self.tp = int(spec.get("tp", 1))
        self.result: Dict[str, Any] = {"role": role, "tp": self.tp, "phases": {}}
        self._tiny = 0
        uses_daemon = base.startswith("kvstrata") or bool(NOOP_LINK.get(base))
        self.daemon = DaemonCtl(**role_daemon(spec, base)) if uses_daemon else None
        self.daemon_pid = DaemonCtl(**spec["daemon"]).pid  # for the CPU probe
        from vllm import LLM, SamplingParams  # noqa: PLC0415
        from vllm.config import KVTransferConfig  # noqa: PLC0415

        self.SamplingParams = SamplingParams
        kvt = None
        if base == "native":
            kvt = KVTransferConfig(kv_connector="OffloadingConnector", kv_role="kv_both",
                                   kv_connector_extra_config={
                                       "spec_name": "CPUOffloadingSpec",
                                       "cpu_bytes_to_use": int(spec["cpu_bytes"]),
                                       "block_size": spec["block_size"]})
        elif base.startswith("kvstrata"):
            kvt = KVTransferConfig(kv_connector="KVStrataConnector",
                                   kv_connector_module_path="kvstrata_vllm", kv_role="kv_both",
                                   kv_load_failure_policy="recompute",
                                   kv_connector_extra_config={
                                       "endpoint": self.daemon.endpoint,
                                       **spec.get("kvstrata_extra", {}),
                                       **ASYNC_EXTRA.get(base, {})})
        elif base in NOOP_LINK:
            extra = {"link": NOOP_LINK[base], "endpoint": self.daemon.endpoint} \
                if self.daemon is not None else {}
            kvt = KVTransferConfig(kv_connector="NoopTraceConnector",
                                   kv_connector_module_path="noop_connector", kv_role="kv_both",
                                   kv_connector_extra_config=extra)
            os.environ["PYTHONPATH"] = os.pathsep.join(  # the engine core imports it
                [str(HERE)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
        self.trace: Optional[Path] = None
        if base.startswith("kvstrata") or base in NOOP_LINK:  # per-step timeline (trace.py)
            self.trace = out.with_suffix(".trace.jsonl")
            self.trace.unlink(missing_ok=True)
            os.environ["KVSTRATA_VLLM_TRACE"] = str(self.trace)
        t0 = time.monotonic()
        self.llm = LLM(model=spec["model"], load_format="dummy", skip_tokenizer_init=True,
                       dtype=spec["dtype"], enforce_eager=spec["enforce_eager"],
                       kv_cache_dtype=spec.get("kv_cache_dtype", "auto"),
                       block_size=spec["block_size"], enable_prefix_caching=True,
                       max_model_len=spec["max_model_len"],
                       num_gpu_blocks_override=spec["gpu_blocks"],
                       gpu_memory_utilization=spec["gpu_memory_utilization"],
                       max_num_seqs=spec.get("max_num_seqs", 64), seed=0,
                       disable_log_stats=False, kv_transfer_config=kvt,
                       **parallel_args(self.tp))
        self.result["engine_start_s"] = round(time.monotonic() - t0, 1)
        log(f"{role}: engine up in {self.result['engine_start_s']} s (tp {self.tp})")
        self.result["cpu_calibration"] = cpu_probe.calibrate()  # a slow core shows here
        log(f"{role}: CPU calibration {self.result['cpu_calibration']}")
        self.warm_up()
        self.record_sessions()
        self.save()

    def save(self) -> None:
        self.out.write_text(json.dumps(self.result, indent=1))

    def record_sessions(self, timeout_s: float = 10.0) -> None:
        """KVStrata roles: the daemon's live sessions (ListSessions) once every rank's worker
        session (vllm-worker-tp<rank>) holds a KV cache registration, or after timeout_s;
        ranks_registered counts those ranks (a TP=2 engine: both)."""
        if self.daemon is None:
            return
        t0 = time.monotonic()
        sessions: List[Dict[str, Any]] = []
        ranks: set = set()
        while time.monotonic() - t0 < timeout_s:
            try:
                sessions = sorted(self.daemon.live_sessions(), key=lambda x: str(x["client"]))
            except kvstrata.KVStrataError as err:
                self.result["daemon_sessions_error"] = str(err)
            ranks = {x["client"] for x in sessions
                     if str(x["client"]).startswith("vllm-worker-") and x["registrations"]}
            if len(ranks) >= self.tp:
                break
            time.sleep(0.1)
        self.result["daemon_sessions"] = sessions
        self.result["ranks_registered"] = len(ranks)
        log(f"{self.role}: {len(ranks)} of {self.tp} ranks registered with the daemon; sessions "
            + ", ".join(f"{x['client']} (ns {x['namespaces']}, reg {x['registrations']})"
                        for x in sessions))

    def phase(self, name: str, value: Any) -> None:
        self.result["phases"][name] = value
        self.save()

    # ------------------------------------------------------------------ requests

    def generate(self, prompts: List[List[int]], max_tokens: int = 1) -> Dict[str, Any]:
        """One llm.generate of these prompts: wall time, and per request its first token,
        top-5 logprobs of the first position, token ids, prefix-cache hit tokens, TTFT."""
        from vllm.inputs import TokensPrompt  # noqa: PLC0415

        sp = self.SamplingParams(max_tokens=max_tokens, temperature=0.0, logprobs=5,
                                 ignore_eos=True)
        m0 = time.monotonic()
        t0 = time.perf_counter()
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], sp,
                                 use_tqdm=False)
        wall = time.perf_counter() - t0
        m1 = time.monotonic()
        reqs = []
        for o in outs:
            c = o.outputs[0]
            first = c.logprobs[0] if c.logprobs else {}
            top = sorted(((tid, lp.logprob) for tid, lp in first.items()),
                         key=lambda x: -x[1])[:5]
            m = getattr(o, "metrics", None)
            ttft = getattr(m, "first_token_latency", None) if m is not None else None
            reqs.append({"tokens": list(c.token_ids), "top5": [[t, round(v, 4)] for t, v in top],
                         "cached": o.num_cached_tokens, "ttft_s": ttft})
        return {"wall_s": wall, "requests": reqs, "timeline": self.timeline(m0, m1)}

    def timeline(self, m0: float, m1: float) -> List[Dict[str, Any]]:
        """The connector's trace events between m0 and m1, at ms from m0."""
        if self.trace is None or not self.trace.is_file():
            return []
        events = []
        for line in self.trace.read_text().splitlines():
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if m0 <= e["t"] <= m1:
                e["at_ms"] = round((e.pop("t") - m0) * 1e3, 2)
                if self.tp == 1:  # under TP the pid tells the ranks' worker events apart
                    e.pop("pid", None)
                events.append(e)
        return events

    def reset_gpu_cache(self) -> None:
        for _ in range(100):
            if self.llm.reset_prefix_cache():
                return
            time.sleep(0.05)
        raise RuntimeError("reset_prefix_cache kept failing (blocks still held)")

    def settle(self) -> None:
        """Wait for stores in flight (KVStrata: no job, no pending L2 write)."""
        if self.daemon is not None:
            self.daemon.wait_idle()
        else:
            time.sleep(1.0)

    # ------------------------------------------------------------------ phases

    def single(self, hits: bool) -> None:
        """Per size: a cold run, then `repeats` runs of the same prompt with the GPU prefix
        cache reset before each (recompute for `none`, offload-tier hits otherwise)."""
        rows = {}
        for n in self.spec["sizes"]:
            p = prompt(n, n)
            cold = self.generate([p])
            self.settle()
            runs = []
            pids = [os.getpid(), self.daemon_pid()]
            before = cpu_probe.snapshot(pids)
            for _ in range(self.spec["repeats"]):
                self.reset_gpu_cache()
                runs.append(self.generate([p]))
            after = cpu_probe.snapshot(pids)
            rows[str(n)] = summarize(cold, runs)
            rows[str(n)]["cpu_hit"] = cpu_probe.delta(before, after, len(runs))
            # The same prompt again without a reset: vLLM's own GPU prefix-cache hit, the
            # floor under any offload tier's hit (median of three).
            before = cpu_probe.snapshot(pids)
            hits = [self.generate([p]) for _ in range(3)]
            rows[str(n)]["cpu_gpu_hit"] = cpu_probe.delta(before, cpu_probe.snapshot(pids), 3)
            rows[str(n)]["gpu_hit_ms"] = round(
                statistics.median(h["wall_s"] for h in hits) * 1e3, 2)
            rows[str(n)]["gpu_hit_runs_ms"] = [round(h["wall_s"] * 1e3, 2) for h in hits]
            rows[str(n)]["gpu_hit_timeline"] = hits[-1]["timeline"]
            rows[str(n)]["gpu_hit_timelines"] = [h["timeline"] for h in hits]
            log(f"{self.role} {n} tokens: cold {cold['wall_s'] * 1e3:.1f} ms, "
                f"{'hit' if hits else 'recompute'} median {rows[str(n)]['median_ms']:.1f} ms, "
                f"cached {rows[str(n)]['cached']}")
            self.phase("single", rows)

    def users(self) -> None:
        """Round 1: every user's unique prompt (prefix + question 1), nothing to reuse (the
        overhead row). Round 2, right after it: the same prefixes with question 2, more
        prefix tokens than the GPU KV budget holds (the beyond-HBM row). The pair runs
        `users_round1_repeats` times, each with fresh prefixes; each round's median wall
        time is reported (its runs in wall_s_runs), the TTFTs and outputs of the last pair.
        Each round submitted at once."""
        u, n = self.spec["users"], self.spec["user_tokens"]
        out: Dict[str, Any] = {}
        walls: Dict[str, List[float]] = {"round1": [], "round2": []}
        for rep in range(max(1, int(self.spec.get("users_round1_repeats", 1)))):
            prefixes = [prompt(10_000 + 1_000 * rep + i, n) for i in range(u)]
            for rnd in (1, 2):
                name = f"round{rnd}"
                row = self._users_round(prefixes, rnd)
                walls[name].append(row["wall_s"])
                row["wall_s_runs"] = list(walls[name])
                row["wall_s"] = round(statistics.median(walls[name]), 3)
                row["prompt_tok_per_s"] = round(row["prompt_tokens"] / row["wall_s"])
                out[name] = row
                self.phase("users", out)

    def _users_round(self, prefixes: List[List[int]], rnd: int) -> Dict[str, Any]:
        q = self.spec["question_tokens"]
        prompts = [pre + prompt(20_000 + 100 * rnd + i, q) for i, pre in enumerate(prefixes)]
        r = self.generate(prompts, max_tokens=self.spec["user_max_tokens"])
        self.settle()
        ttfts = sorted(x["ttft_s"] for x in r["requests"] if x["ttft_s"] is not None)
        tokens = sum(len(p) for p in prompts)
        log(f"{self.role} users round {rnd}: {r['wall_s']:.2f} s, "
            f"{tokens / r['wall_s']:.0f} prompt tok/s, TTFT p50 {pct(ttfts, 50)} ms "
            f"p90 {pct(ttfts, 90)} ms, cached {sum(x['cached'] or 0 for x in r['requests'])}")
        return {"wall_s": round(r["wall_s"], 3), "prompt_tokens": tokens,
                "prompt_tok_per_s": round(tokens / r["wall_s"]),
                "ttft_p50_ms": pct(ttfts, 50), "ttft_p90_ms": pct(ttfts, 90),
                "cached_tokens": sum(x["cached"] or 0 for x in r["requests"]),
                "outputs": [x["tokens"] for x in r["requests"]],
                "first_top5": [x["top5"] for x in r["requests"]]}

    def cross_instance(self) -> None:
        """A fresh engine: the prompts engine A computed, hits only through KVStrata."""
        rows = {}
        for n in self.spec["sizes"]:
            r = self.generate([prompt(n, n)])
            self.settle()
            rows[str(n)] = {"ms": round(r["wall_s"] * 1e3, 2), "prompt_tokens": n,
                            "timeline": r["timeline"],
                            "cached": r["requests"][0]["cached"],
                            "tokens": r["requests"][0]["tokens"],
                            "top5": r["requests"][0]["top5"]}
            log(f"{self.role} cross-instance {n}: {rows[str(n)]['ms']} ms, "
                f"cached {rows[str(n)]['cached']}")
            self.phase("cross_instance", rows)

    def warm_up(self) -> None:
        """Tiny unique requests: the first requests of an engine (and a connector's first
        session) pay one-time costs that no measured row should carry."""
        for _ in range(2):
            self._tiny += 1
            self.generate([prompt(900_000 + self._tiny, 40)])

    PROBE = 10_000_000  # seed of the probe prompt, stored before any restart
    # 1024 tokens (64 blocks): a hit of a few blocks is not one the load planner takes (a
    # 48-token prefill costs an H100 what a 1-token step does), and after a restart the
    # probe sits in L2, which it recomputes until the lookup's promotion has landed in L1.
    PROBE_TOKENS = 1024

    def store_probe(self) -> None:
        self.generate([prompt(self.PROBE, self.PROBE_TOKENS)])
        self.settle()

    def reconnect(self, expected: Dict[str, Any], timeout_s: float = 60.0) -> float:
        """After a daemon (re)start: the probe prompt again and again (GPU cache reset) until
        it hits through KVStrata -- the engine's scheduler and worker sessions reconnect on
        their first failing call, so a restart costs an engine a few misses -- and the
        daemon lists the engine's sessions with their KV cache registrations; seconds."""
        assert self.daemon is not None
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout_s:
            self.reset_gpu_cache()
            hit = self.generate([prompt(self.PROBE, self.PROBE_TOKENS)])["requests"][0]["cached"] or 0
            if hit >= self.PROBE_TOKENS // 2 and self.daemon.wait_sessions(expected, timeout_s=0.5) < 0.5:
                return time.monotonic() - t0
            time.sleep(0.05)
        raise RuntimeError(f"the engine did not reconnect within {timeout_s}s: "
                           f"{self.daemon.registered()} (expected {expected})")

    def restart_daemon(self) -> Dict[str, float]:
        assert self.daemon is not None
        self.daemon.wait_idle()
        expected = self.daemon.registered()
        start_s = self.daemon.restart()
        return {"start_s": round(start_s, 2), "reconnect_s": round(self.reconnect(expected), 2)}

    def l2_hits(self) -> None:
        """Daemon restarted (L1 empty, L2 on disk kept): hits come from L2."""
        self.store_probe()
        runs: Dict[str, List[Dict[str, Any]]] = {str(n): [] for n in self.spec["sizes"]}
        restarts = []
        read: Dict[str, List[Optional[int]]] = {str(n): [] for n in self.spec["sizes"]}
        for _ in range(self.spec["repeats"]):
            restarts.append(self.restart_daemon())
            for n in self.spec["sizes"]:
                self.reset_gpu_cache()
                before = self.l2_read_bytes()
                runs[str(n)].append(self.generate([prompt(n, n)]))
                after = self.l2_read_bytes()
                read[str(n)].append(after - before if None not in (before, after) else None)
                self.settle()
        rows = {n: summarize(None, r) for n, r in runs.items()}
        for n, row in rows.items():  # bytes the daemon read from L2 during each run (ListTiers)
            row["l2_read_bytes"] = read[n]
        self.phase("l2_hit", {"rows": rows, "restarts": restarts})
        for n, row in rows.items():
            log(f"{self.role} L2 hit {n}: median {row['median_ms']:.1f} ms, cached {row['cached']}")

    def l2_read_bytes(self) -> Optional[int]:
        """The daemon's L2 read_bytes counter (ListTiers), None if it cannot be read."""
        assert self.daemon is not None
        try:
            l2 = self.daemon.tiers().get("l2")
        except kvstrata.KVStrataError:
            return None
        return int(l2.read_bytes) if l2 is not None else None

    def fault(self) -> None:
        """kill -9 of the daemon while a 32K-token load is in flight: the request completes
        (recompute), then the daemon comes back and hits resume."""
        assert self.daemon is not None
        n = max(self.spec["sizes"])
        self.reset_gpu_cache()
        expected = self.daemon.registered()
        # 60 ms in: a 32K hit's load runs from ~25 to ~110 ms after generate() on an H100.
        delay = self.spec.get("fault_delay_s", 0.06)
        killer = threading.Timer(delay, self.daemon.kill9)
        killer.start()
        t0 = time.perf_counter()
        r = self.generate([prompt(n, n)])
        killer.join()
        submitted = [e["at_ms"] for e in r["timeline"] if e["ev"] == "load_submit"]
        row: Dict[str, Any] = {"kill_after_s": delay, "completed": len(r["requests"]) == 1,
                               "killed_during_load": bool(submitted)
                               and submitted[0] < delay * 1e3,
                               "ms": round((time.perf_counter() - t0) * 1e3, 1),
                               "cached": r["requests"][0]["cached"],
                               "tokens": r["requests"][0]["tokens"],
                               "top5": r["requests"][0]["top5"], "timeline": r["timeline"]}
        log(f"{self.role} fault: request done in {row['ms']} ms with the daemon killed")
        self.daemon.start()
        row["reconnect_s"] = round(self.reconnect(expected), 2)
        m = min(self.spec["sizes"][1:] or self.spec["sizes"])
        # Its units are in L2 only now: the load planner may recompute the first request
        # (a disk slower than prefill) while its lookup promotes them into L1; the second
        # then hits.
        for attempt in (1, 2):
            self.reset_gpu_cache()
            after = self.generate([prompt(m, m)])
            if after["requests"][0]["cached"]:
                break
            time.sleep(1.0)
        row["after_attempts"] = attempt
        row["after"] = {"prompt_tokens": m, "ms": round(after["wall_s"] * 1e3, 1),
                        "cached": after["requests"][0]["cached"],
                        "tokens": after["requests"][0]["tokens"],
                        "top5": after["requests"][0]["top5"], "timeline": after["timeline"]}
        log(f"{self.role} fault: after the restart {m} tokens cached "
            f"{row['after']['cached']} in {row['after']['ms']} ms")
        self.phase("fault", row)

    # ------------------------------------------------------------------ tp > 1

    MISS_SEED = 30_000_000  # seed of the one-rank-miss prompt (no other role stores it)

    def miss_prompt(self) -> List[int]:
        n = int(self.spec.get("one_rank_miss_tokens", 8192))
        return prompt(self.MISS_SEED, n)

    def one_rank_miss_ref(self) -> None:
        """Role `none`, tp > 1: the one-rank-miss prompt without KVStrata (the reference
        output of kvstrata_b's one_rank_miss)."""
        r = self.generate([self.miss_prompt()])
        self.phase("one_rank_miss_ref", {"prompt_tokens": len(self.miss_prompt()),
                                         "tokens": r["requests"][0]["tokens"],
                                         "top5": r["requests"][0]["top5"]})

    def rank_blocks(self) -> Dict[str, int]:
        """Blocks (all tiers) of this engine's namespaces, by tp_rank ("tp0", "tp1", ...)."""
        assert self.daemon is not None
        return {f"tp{ns.spec.tp_rank}": int(ns.blocks) for ns in self.miss_namespaces(None)}

    def miss_namespaces(self, rank: Optional[int]) -> List[Any]:
        """This model's namespaces of this TP size (of one rank, or all); the connector names
        the model by vLLM's model path, the spec's --model (all of them if none matches)."""
        assert self.daemon is not None
        mine = [ns for ns in self.daemon.namespaces() if ns.spec.tp_size == self.tp
                and (rank is None or ns.spec.tp_rank == rank)]
        same_model = [ns for ns in mine if ns.spec.model == str(self.spec["model"])]
        return same_model or mine

    def one_rank_miss(self) -> None:
        """A fresh prompt stored by both ranks (a control hit through KVStrata proves it),
        then tp_rank 1's whole namespace cleared (every tier) and the GPU prefix cache reset:
        the prompt must be a miss on every rank -- no KVStrata tokens, no load submitted by
        rank 0 alone -- and recompute the same output. Last phase: it drops every block of
        rank 1, which later phases (cross-instance hits) would need."""
        assert self.daemon is not None
        p = self.miss_prompt()
        want = (len(p) - 1) // self.spec["block_size"] * self.spec["block_size"]
        row: Dict[str, Any] = {"prompt_tokens": len(p), "cleared_rank": 1}

        def brief(r: Dict[str, Any], events: List[Dict[str, Any]]) -> Dict[str, Any]:
            return {"ms": round(r["wall_s"] * 1e3, 2), "cached": r["requests"][0]["cached"],
                    "tokens": r["requests"][0]["tokens"], "top5": r["requests"][0]["top5"],
                    "load_submits": sum(e["ev"] == "load_submit" for e in events),
                    "lookup_units": [e.get("units") for e in events if e["ev"] == "lookup"],
                    "timeline": r["timeline"]}

        first = self.generate([p])
        self.settle()
        row["first"] = brief(first, first["timeline"])
        # Until the daemon serves it from both ranks (the stores are in): a hit of `want`.
        control = None
        for _ in range(20):
            self.reset_gpu_cache()
            control = self.generate([p])
            self.settle()
            if (control["requests"][0]["cached"] or 0) >= want:
                break
            time.sleep(0.1)
        assert control is not None
        row["control"] = brief(control, control["timeline"])
        row["blocks_before"] = self.rank_blocks()
        self.reset_gpu_cache()
        m0 = time.monotonic()
        row["clear"] = []
        targets = self.miss_namespaces(1)
        for _ in range(20):  # blocks still leased are skipped by Clear: again until none left
            for ns in targets:
                row["clear"] += [f"{ns.fingerprint[:16]}: {m}"
                                 for m in self.daemon.clear(ns.fingerprint)]
            left = sum(int(ns.blocks) for ns in self.miss_namespaces(1))
            if left == 0:
                break
            time.sleep(0.1)
        row["blocks_after"] = self.rank_blocks()
        # Rank 1 holds none of its blocks now, every other rank still holds its own.
        row["cleared"] = (bool(targets) and row["blocks_after"].get("tp1", 0) == 0
                          and all(v > 0 for k, v in row["blocks_after"].items() if k != "tp1"))
        miss = self.generate([p])
        # From before the clear to the end of the request: no rank may have submitted a load.
        row["miss"] = brief(miss, self.timeline(m0, time.monotonic()))
        self.settle()
        log(f"{self.role} one rank misses: control cached {row['control']['cached']}, rank "
            f"blocks {row['blocks_before']} -> {row['blocks_after']}, then cached "
            f"{row['miss']['cached']}, load_submit {row['miss']['load_submits']}, "
            f"{row['miss']['ms']} ms")
        self.phase("one_rank_miss", row)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    roles = ("none", "native", "kvstrata", "kvstrata_async", "kvstrata_batch", "kvstrata_b",
             *NOOP_LINK)
    ap.add_argument("--role", required=True,
                    help=f"one of {', '.join(roles)}, optionally with a suffix .N (the same "
                         "role in another engine process: kvstrata.2)")
    ap.add_argument("--spec", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    base = args.role.split(".")[0]
    if base not in roles:
        ap.error(f"unknown role {args.role}")
    spec = json.loads(Path(args.spec).read_text())
    global VOCAB
    VOCAB = spec["vocab"]
    parallel_env(int(spec.get("tp", 1)))
    b = Bench(args.role, spec, Path(args.out))
    if base != "kvstrata_b":
        b.single(hits=base != "none")
        if spec["users"] > 0:
            b.users()
        if base == "none" and b.tp > 1:
            b.one_rank_miss_ref()
    else:
        b.cross_instance()
        b.l2_hits()
        b.fault()
        if b.tp > 1:
            try:
                b.one_rank_miss()
            except (kvstrata.KVStrataError, RuntimeError) as err:  # reported, not fatal
                log(f"{args.role} one rank misses: {err}")
                b.phase("one_rank_miss", {"error": str(err)})
    b.result["done"] = True
    b.save()
    log(f"{args.role}: done")
    try:
        b.llm.llm_engine.engine_core.shutdown()
    except Exception as err:  # noqa: BLE001 - run.py kills the process group anyway
        log(f"engine shutdown: {err}")
    os._exit(0)  # Skip vLLM's slow interpreter teardown; the results are written.


if __name__ == "__main__":
    sys.exit(main())
