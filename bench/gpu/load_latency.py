#!/usr/bin/env python3
"""Load latency of Llama-3.1-8B KV from kvstratad's L1 into the GPU, next to the time a
real prefill of the same number of tokens takes on the same GPU.

    python3 bench/gpu/load_latency.py --out load_latency.json

For 1K, 8K and 32K tokens (64, 512 and 2048 blocks of 16 tokens, 2 MiB per block): the
blocks are stored once from GPU block ids [0, n), then loaded repeatedly into different,
poisoned block ids [n_max, n_max + n) — submit_load + wait for its completion, the daemon
copying L1 -> GPU — and the median is reported (first load of each size checked
byte-exact). The prefill is a LlamaForCausalLM of Llama-3.1-8B dimensions with random bf16
weights (transformers, attn_implementation="sdpa", no download; without transformers a
built-in Llama forward of the same shapes using torch SDPA), under torch.no_grad with a KV
cache, computing only the last position's logits; median of repeats after a warm-up.
The ratio prefill_time / load_time is what loading saves (public reference points at 8K
tokens: 22x for vLLM's native CPU offload, 16.8x for llm-d's file-system backend).

The daemon is started from $KVSTRATA_DAEMON (default .bundle/bin/kvstratad, else build/)
unless --endpoint names a running one.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

REPO = Path(__file__).resolve().parents[2]
LAYERS, KV_HEADS, HEAD_SIZE, TOKENS = 32, 8, 128, 16
BLOCK_BYTES = 2 * LAYERS * KV_HEADS * HEAD_SIZE * TOKENS * 2
SIZES_TOKENS = (1024, 8192, 32768)
REFERENCES_8K = {"vllm_native_cpu_offload": 22.0, "llm_d_fs_backend": 16.8}
LLAMA_31_8B = dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336,
                   num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                   max_position_embeddings=131072, rms_norm_eps=1e-5, rope_theta=500000.0,
                   hidden_act="silu", tie_word_embeddings=False)


def log(msg: str) -> None:
    print(f"[load_latency {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---------------------------------------------------------------------- daemon


def start_daemon(l1: str, settings: Optional[Dict[str, str]] = None) -> Any:
    """A kvstratad on a temporary socket, through the tests' launcher (tests/integration/
    python/kvs_testing.py: $KVSTRATA_DAEMON, build/ or .bundle/); `settings` are more
    section.key=value config overrides."""
    sys.path.insert(0, str(REPO / "tests" / "integration" / "python"))
    import kvs_testing

    daemon = kvs_testing.Daemon(kvs_testing.short_tmpdir(),
                                {"l1.capacity": l1, "l1.slab_size": "64MiB", "l2.enabled": "false",
                                 **(settings or {})})
    daemon.start_timeout_s = 60.0  # populating + pinning several GiB takes a few seconds
    try:
        return daemon.start()
    except BaseException as err:  # pytest.fail's exception: keep what the launcher said.
        if isinstance(err, KeyboardInterrupt):
            raise
        shutil.rmtree(daemon.workdir, ignore_errors=True)
        raise SystemExit(str(err)) from None


def stop_daemon(daemon: Any) -> None:
    if daemon.running():
        daemon.proc.send_signal(signal.SIGTERM)
        try:
            daemon.proc.wait(30)
        except subprocess.TimeoutExpired:
            daemon.kill()
    shutil.rmtree(daemon.workdir, ignore_errors=True)


# ---------------------------------------------------------------------- load latency


def process_cpu_seconds(pid: Optional[int]) -> float:
    """User + system CPU seconds of a process (0 when unknown): the daemon's cost."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure_loads(endpoint: str, sizes_blocks: List[int], repeats: Dict[int, int],
                  daemon_pid: Optional[int] = None) -> Dict[str, Any]:
    import torch

    import kvstrata

    sys.path.insert(0, str(REPO / "connector_vllm"))  # vLLM's layouts, without vLLM
    from kvstrata_vllm.kv_layouts import kv_cache_pieces

    n_max = max(sizes_blocks)
    num_blocks = 2 * n_max
    dev = torch.device("cuda", 0)
    log(f"allocating the KV cache: 32 x [2, {num_blocks}, 16, 8, 128] bf16 "
        f"({num_blocks * BLOCK_BYTES / 2**30:.1f} GiB)")
    layers = [torch.empty(2, num_blocks, TOKENS, KV_HEADS, HEAD_SIZE, dtype=torch.bfloat16, device=dev)
              for _ in range(LAYERS)]
    raw = [t.view(torch.uint8).view(2, num_blocks, -1) for t in layers]

    def blocks(ids: range) -> Any:
        return torch.cat([r[:, ids.start:ids.stop].transpose(0, 1).reshape(len(ids), -1) for r in raw], 1)

    for r in raw:
        r[:, :n_max].random_(0, 256)
    rng = random.Random(1234)
    keys = [rng.randbytes(32) for _ in range(n_max)]
    out: Dict[str, Any] = {"sizes": []}
    with kvstrata.Session(endpoint=endpoint, client_name="bench-load-latency", timeout=60.0) as s:
        ns = s.register_namespace(engine="vllm", model="meta-llama/Llama-3.1-8B", dtype="bfloat16",
                                  num_layers=LAYERS, num_kv_heads=KV_HEADS, head_size=HEAD_SIZE,
                                  tokens_per_block=TOKENS, kv_layout="vllm_nhd",
                                  salt=f"bench-{os.getpid()}")
        t0 = time.perf_counter()
        reg = s.register_cuda_kv_caches(ns, kv_cache_pieces(
            {f"model.layers.{i}.self_attn.attn": t for i, t in enumerate(layers)}, "vllm_nhd"))
        out["register_s"] = time.perf_counter() - t0
        out["pieces_per_block"] = len(reg.description.pieces)
        torch.cuda.synchronize()
        cpu0 = process_cpu_seconds(daemon_pid)
        t0 = time.perf_counter()
        jobs = [s.submit_store(ns, reg, keys[i:i + 512], list(range(i, min(i + 512, n_max))))
                for i in range(0, n_max, 512)]
        for j, c in s.wait_jobs(jobs, timeout=120).items():
            if not c.ok:
                raise SystemExit(f"store job {j} failed: {list(c.failed_blocks)[:8]} {c.error}")
        store_s = time.perf_counter() - t0
        out["store_all"] = {"blocks": n_max, "seconds": store_s,
                            "gbps": n_max * BLOCK_BYTES / store_s / 1e9,
                            "daemon_cpu_ms_per_gb": (process_cpu_seconds(daemon_pid) - cpu0) * 1e3
                            / (n_max * BLOCK_BYTES / 1e9)}
        load_cpu, load_bytes = 0.0, 0
        log(f"stored {n_max} blocks in {store_s * 1e3:.1f} ms "
            f"({out['store_all']['gbps']:.1f} GB/s)")
        for n in sizes_blocks:
            dst = range(n_max, n_max + n)
            times = []
            for rep in range(repeats[n]):
                for r in raw:
                    r[:, dst.start:dst.stop].fill_(0xA5)
                torch.cuda.synchronize()
                cpu0 = process_cpu_seconds(daemon_pid)
                t0 = time.perf_counter()
                job = s.submit_load(ns, reg, keys[:n], list(dst))
                c = s.wait_job(job, timeout=120)
                times.append(time.perf_counter() - t0)
                load_cpu += process_cpu_seconds(daemon_pid) - cpu0
                load_bytes += n * BLOCK_BYTES
                if not c.ok:
                    raise SystemExit(f"load of {n} blocks failed: {list(c.failed_blocks)[:8]} {c.error}")
                if rep == 0 and not torch.equal(blocks(dst), blocks(range(0, n))):
                    raise SystemExit(f"load of {n} blocks: bytes differ from the stored blocks")
            med = statistics.median(times)
            row = {"tokens": n * TOKENS, "blocks": n, "bytes": n * BLOCK_BYTES, "repeats": len(times),
                   "load_median_s": med, "load_min_s": min(times), "load_max_s": max(times),
                   "load_gbps": n * BLOCK_BYTES / med / 1e9, "verified": True}
            out["sizes"].append(row)
            log(f"load {n * TOKENS:>6} tokens ({n} blocks, {n * BLOCK_BYTES / 2**20:.0f} MiB): "
                f"median {med * 1e3:.2f} ms, {row['load_gbps']:.1f} GB/s over {len(times)} runs")
        out["load_daemon_cpu_ms_per_gb"] = load_cpu * 1e3 / (load_bytes / 1e9)
        log(f"daemon CPU: {out['load_daemon_cpu_ms_per_gb']:.2f} ms per GB loaded, "
            f"{out['store_all']['daemon_cpu_ms_per_gb']:.2f} ms per GB stored")
        s.unregister_cuda_kv_caches(reg)
    layers = raw = None  # free the KV cache before the prefill model is built
    torch.cuda.empty_cache()
    return out


# ---------------------------------------------------------------------- prefill


def build_transformers_model() -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**LLAMA_31_8B)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    prev = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("cuda"):
            model = None
            for dtype_kw in ("dtype", "torch_dtype"):  # "torch_dtype" before transformers 4.56
                try:
                    model = LlamaForCausalLM._from_config(config, attn_implementation="sdpa",
                                                          **{dtype_kw: torch.bfloat16})
                    break
                except TypeError:
                    continue
            if model is None:
                model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(prev)
    model = model.to(device="cuda", dtype=torch.bfloat16).eval()
    return model


def transformers_prefill(model: Any, input_ids: Any) -> None:
    out = model.model(input_ids=input_ids, use_cache=True)
    model.lm_head(out.last_hidden_state[:, -1:, :])  # logits of the last position only


class BuiltinLlama:
    """A Llama forward (RMSNorm, RoPE, GQA with SDPA, SwiGLU) with random bf16 weights."""

    def __init__(self, cfg: Dict[str, Any]) -> None:
        import torch

        g = torch.Generator(device="cuda").manual_seed(0)
        h, i, nl = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
        self.nh, self.nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
        self.hd = h // self.nh
        self.eps, self.theta = cfg["rms_norm_eps"], cfg["rope_theta"]

        def w(*shape: int) -> Any:
            return (torch.randn(*shape, device="cuda", dtype=torch.bfloat16, generator=g) * 0.02)

        self.embed = w(cfg["vocab_size"], h)
        self.layers = [dict(qkv=w((self.nh + 2 * self.nkv) * self.hd, h), o=w(h, h),
                            gate_up=w(2 * i, h), down=w(h, i),
                            n1=torch.ones(h, device="cuda", dtype=torch.bfloat16),
                            n2=torch.ones(h, device="cuda", dtype=torch.bfloat16)) for _ in range(nl)]
        self.norm = torch.ones(h, device="cuda", dtype=torch.bfloat16)
        self.lm_head = w(cfg["vocab_size"], h)

    def _rms(self, x: Any, weight: Any) -> Any:
        import torch

        var = x.float().pow(2).mean(-1, keepdim=True)
        return (x.float() * torch.rsqrt(var + self.eps)).to(x.dtype) * weight

    def __call__(self, input_ids: Any) -> Any:
        import torch
        import torch.nn.functional as F

        n = input_ids.shape[1]
        x = self.embed[input_ids[0]]
        pos = torch.arange(n, device="cuda", dtype=torch.float32)
        inv = 1.0 / (self.theta ** (torch.arange(0, self.hd, 2, device="cuda", dtype=torch.float32) / self.hd))
        ang = torch.outer(pos, inv)
        cos, sin = torch.cat([ang.cos()] * 2, -1).to(x.dtype), torch.cat([ang.sin()] * 2, -1).to(x.dtype)

        def rope(t: Any) -> Any:
            a, b = t[..., : self.hd // 2], t[..., self.hd // 2:]
            return t * cos + torch.cat([-b, a], -1) * sin

        cache = []
        for L in self.layers:
            hs = self._rms(x, L["n1"])
            qkv = hs @ L["qkv"].t()
            q, k, v = qkv.split([self.nh * self.hd, self.nkv * self.hd, self.nkv * self.hd], -1)
            q = rope(q.view(n, self.nh, self.hd).transpose(0, 1))
            k = rope(k.view(n, self.nkv, self.hd).transpose(0, 1))
            v = v.view(n, self.nkv, self.hd).transpose(0, 1)
            cache.append((k, v))
            rep = self.nh // self.nkv
            attn = F.scaled_dot_product_attention(q[None], k.repeat_interleave(rep, 0)[None],
                                                  v.repeat_interleave(rep, 0)[None], is_causal=True)
            x = x + attn[0].transpose(0, 1).reshape(n, -1) @ L["o"].t()
            hs = self._rms(x, L["n2"])
            gate, up = (hs @ L["gate_up"].t()).chunk(2, -1)
            x = x + (F.silu(gate) * up) @ L["down"].t()
        return self._rms(x[-1:], self.norm) @ self.lm_head.t()


def measure_prefill(sizes_tokens: List[int], repeats: int) -> Dict[str, Any]:
    import torch

    out: Dict[str, Any] = {}
    t0 = time.perf_counter()
    try:
        model = build_transformers_model()
        import transformers

        out["impl"] = f"transformers {transformers.__version__} LlamaForCausalLM (sdpa)"

        def run(ids: Any) -> None:
            transformers_prefill(model, ids)
    except Exception as err:  # Not installed, or an API this script does not know.
        log(f"transformers not usable ({type(err).__name__}: {err}); "
            "using the built-in Llama forward")
        out["transformers_error"] = f"{type(err).__name__}: {err}"
        model = None
        torch.cuda.empty_cache()
        model = BuiltinLlama(LLAMA_31_8B)
        out["impl"] = "built-in Llama-3.1-8B forward (torch SDPA)"

        def run(ids: Any) -> None:
            model(ids)
    torch.cuda.synchronize()
    out["build_s"] = time.perf_counter() - t0
    out["weights_gib"] = torch.cuda.memory_allocated() / 2**30
    log(f"prefill model: {out['impl']}, built in {out['build_s']:.1f} s, "
        f"{out['weights_gib']:.1f} GiB allocated")
    gen = torch.Generator(device="cuda").manual_seed(1)
    out["sizes"] = []
    with torch.no_grad():
        run(torch.randint(0, LLAMA_31_8B["vocab_size"], (1, 1024), device="cuda", generator=gen))
        torch.cuda.synchronize()  # warm-up: kernels, cuBLAS handles
        for n in sizes_tokens:
            ids = torch.randint(0, LLAMA_31_8B["vocab_size"], (1, n), device="cuda", generator=gen)
            run(ids)  # warm-up at this length
            torch.cuda.synchronize()
            times = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                run(ids)
                torch.cuda.synchronize()
                times.append(time.perf_counter() - t0)
            med = statistics.median(times)
            out["sizes"].append({"tokens": n, "prefill_median_s": med, "prefill_min_s": min(times),
                                 "repeats": repeats, "tokens_per_s": n / med})
            log(f"prefill {n:>6} tokens: median {med * 1e3:.1f} ms ({n / med:,.0f} tok/s)")
    model = None
    torch.cuda.empty_cache()
    return out


# ---------------------------------------------------------------------- main


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="JSON results file")
    ap.add_argument("--endpoint", help="a running kvstratad (default: start one)")
    ap.add_argument("--l1", default="8GiB", help="L1 capacity of the started daemon")
    ap.add_argument("--tokens", default=",".join(map(str, SIZES_TOKENS)),
                    help="comma-separated token counts (multiples of 16)")
    ap.add_argument("--load-repeats", type=int, default=0, help="0 = 20/10/5 by size")
    ap.add_argument("--prefill-repeats", type=int, default=3)
    ap.add_argument("--skip-prefill", action="store_true")
    args = ap.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print("no CUDA device: benchmark skipped", flush=True)
        return 2
    sizes_tokens = [int(t) for t in args.tokens.split(",")]
    sizes_blocks = [t // TOKENS for t in sizes_tokens]
    repeats = {n: args.load_repeats or (20 if n <= 64 else 10 if n <= 512 else 5) for n in sizes_blocks}
    result: Dict[str, Any] = {
        "benchmark": "kvstrata load latency vs prefill, Llama-3.1-8B KV (bf16, 16 tokens/block)",
        "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
        "block_bytes": BLOCK_BYTES, "references_8k_ratio": REFERENCES_8K,
    }
    daemon = None
    endpoint = args.endpoint
    try:
        if endpoint is None:
            daemon = start_daemon(args.l1)
            endpoint = daemon.endpoint
        result["load"] = measure_loads(endpoint, sizes_blocks, repeats,
                                       daemon.proc.pid if daemon is not None else None)
    except (SystemExit, Exception) as err:  # Keep what we know in the JSON, then fail.
        result["error"] = f"{type(err).__name__}: {err}"
        if daemon is not None:
            result["daemon_log_tail"] = daemon.log_tail()
        print(f"load measurement failed: {result['error']}", file=sys.stderr, flush=True)
    finally:
        if daemon is not None:
            stop_daemon(daemon)
    if "error" in result:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
        return 1
    if not args.skip_prefill:
        result["prefill"] = measure_prefill(sizes_tokens, args.prefill_repeats)
        rows = []
        for ld, pf in zip(result["load"]["sizes"], result["prefill"]["sizes"]):
            rows.append({"tokens": ld["tokens"], "load_ms": ld["load_median_s"] * 1e3,
                         "prefill_ms": pf["prefill_median_s"] * 1e3,
                         "speedup": pf["prefill_median_s"] / ld["load_median_s"],
                         "load_gbps": ld["load_gbps"]})
        result["summary"] = rows
        print(f"{'tokens':>7} {'load ms':>9} {'prefill ms':>11} {'prefill/load':>13} {'GB/s':>6}")
        for r in rows:
            print(f"{r['tokens']:>7} {r['load_ms']:>9.2f} {r['prefill_ms']:>11.1f} "
                  f"{r['speedup']:>12.1f}x {r['load_gbps']:>6.1f}")
        print("reference at 8K tokens: 22x vLLM native CPU offload, 16.8x llm-d FS backend")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
