"""The benchmarks' GPU KV caches and ceilings, shared by engine_jobs.py (one engine, every
layout) and node_loads.py (one engine per GPU of the node): a registered CUDA KV cache of
Llama-3.1-8B dimensions (32 layers, 8 KV heads, head 128, bf16) in one of the engines'
layouts, its poisoning and byte checks, the torch copy ceilings pinned host <-> GPU, and
waiting for a job that must succeed.

torch and the connectors' layout modules are imported by the functions that need them, so
that the benchmarks' pure logic imports without a GPU.
"""
from __future__ import annotations

import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

REPO = Path(__file__).resolve().parents[2]
# The engines' layouts, from the connectors' sources (neither needs its engine installed).
sys.path.insert(0, str(REPO / "connector_vllm"))    # kvstrata_vllm.kv_layouts
sys.path.insert(0, str(REPO / "connector_sglang"))  # kvstrata_sglang.device_pool

LAYERS, KV_HEADS, HEAD, MLA_DIM = 32, 8, 128, 576  # MLA: kv_lora_rank 512 + rope 64
LLAMA, DEEPSEEK = "meta-llama/Llama-3.1-8B", "deepseek-ai/DeepSeek-V3"
LAYOUTS = ("nhd16", "hnd16", "nhd32", "flashinfer", "mla", "cross_layer", "sglang", "sglang_mla")
GIB = 1 << 30


@dataclass
class Cache:
    pieces: Callable[[], List[Any]]  # what register_cuda_kv_caches gets (TensorPieces)
    layout: str              # the connector's layout the pieces come from
    spec: Dict[str, Any]     # register_namespace fields
    parts: List[Tuple[Any, int, int]]  # (uint8 view, block dim, rows per block): poison/verify
    tpb: int                 # tokens per block

    def poison(self, start: int, n: int, fill: Optional[Callable[[Any], Any]] = None) -> None:
        """Fills blocks [start, start + n) (default: every byte 0xA5) and waits for it."""
        import torch

        for t, dim, rows in self.parts:
            view = t.narrow(dim, start * rows, n * rows)
            view.fill_(0xA5) if fill is None else fill(view)
        torch.cuda.synchronize(self.parts[0][0].device)

    def same(self, a: int, b: int, n: int) -> bool:
        """Whether blocks [a, a + n) hold the bytes of blocks [b, b + n)."""
        import torch

        return all(torch.equal(t.narrow(d, a * r, n * r), t.narrow(d, b * r, n * r))
                   for t, d, r in self.parts)

    def wrong_bytes(self, a: int, b: int, n: int) -> int:
        """How many bytes of blocks [a, a + n) differ from those of blocks [b, b + n)."""
        return sum(int((t.narrow(d, a * r, n * r) != t.narrow(d, b * r, n * r)).sum().item())
                   for t, d, r in self.parts)


def build_cache(name: str, nb: int, device: str = "cuda") -> Cache:
    """The KV cache of one layout with nb blocks, allocated on `device` (default: the
    current CUDA device)."""
    import torch
    from kvstrata_sglang.device_pool import device_pool_pieces
    from kvstrata_vllm.kv_layouts import kv_cache_pieces

    def bf16(*shape: int) -> Any:
        return torch.empty(*shape, dtype=torch.bfloat16, device=device)

    def vllm(kv: Any, kv_layout: str) -> Tuple[Callable[[], List[Any]], str]:
        """vLLM's caches (per-layer: a dict by layer name) as pieces, by kv_layout."""
        if isinstance(kv, list):
            kv = {f"model.layers.{i}.self_attn.attn": t for i, t in enumerate(kv)}
        return lambda: kv_cache_pieces(kv, kv_layout), f"kvstrata_vllm.kv_layouts {kv_layout}"

    def sglang(buffers: Any, page: int) -> Tuple[Callable[[], List[Any]], str]:
        return (lambda: device_pool_pieces(buffers, page),
                f"kvstrata_sglang.device_pool page_size={page}")

    def u8(ts: List[Any], dim: int, rows: int = 1) -> List[Tuple[Any, int, int]]:
        return [(t.view(torch.uint8), dim, rows) for t in ts]

    spec = dict(engine="vllm", model=LLAMA, dtype="bfloat16", num_layers=LAYERS,
                num_kv_heads=KV_HEADS, head_size=HEAD, tokens_per_block=16, kv_layout="vllm_nhd")
    mla = dict(model=DEEPSEEK, num_kv_heads=1, head_size=MLA_DIM, attention="mla")
    if name in ("nhd16", "nhd32"):
        tpb = 16 if name == "nhd16" else 32
        ts = [bf16(2, nb, tpb, KV_HEADS, HEAD) for _ in range(LAYERS)]
        return Cache(*vllm(ts, "vllm_nhd"), {**spec, "tokens_per_block": tpb}, u8(ts, 1), tpb)
    if name == "hnd16":
        ts = [bf16(2, nb, KV_HEADS, 16, HEAD) for _ in range(LAYERS)]
        views = [t.permute(0, 1, 3, 2, 4) for t in ts]  # logical [2, N, 16, 8, 128]
        return Cache(*vllm(views, "vllm_hnd"), {**spec, "kv_layout": "vllm_hnd"}, u8(ts, 1), 16)
    if name == "flashinfer":
        ts = [bf16(nb, 2, 16, KV_HEADS, HEAD) for _ in range(LAYERS)]
        return Cache(*vllm(ts, "vllm_nhd"), spec, u8(ts, 0), 16)
    if name == "mla":
        ts = [bf16(nb, 16, MLA_DIM) for _ in range(LAYERS)]
        return Cache(*vllm(ts, "vllm_nhd"), {**spec, **mla}, u8(ts, 0), 16)
    if name == "cross_layer":
        t = bf16(nb, LAYERS, 2, 16, KV_HEADS, HEAD)
        return Cache(*vllm(t, "vllm_cross_layer"), {**spec, "kv_layout": "vllm_cross_layer"},
                     u8([t], 0), 16)
    sgl = {**spec, "engine": "sglang", "kv_layout": "sglang_page_first_direct"}
    if name == "sglang":
        k = [bf16(nb * 16, KV_HEADS, HEAD) for _ in range(LAYERS)]
        v = [bf16(nb * 16, KV_HEADS, HEAD) for _ in range(LAYERS)]
        return Cache(*sglang((k, v), 16), sgl, u8(k + v, 0, 16), 16)
    if name == "sglang_mla":
        kv = [bf16(nb * 16, 1, MLA_DIM) for _ in range(LAYERS)]
        return Cache(*sglang(kv, 16), {**sgl, **mla}, u8(kv, 0, 16), 16)
    raise ValueError(f"unknown layout {name!r}")


def measure_ceilings(device: str = "cuda",
                     sizes: Sequence[Tuple[str, int]] = (("1GiB", GIB), ("128MiB", 128 << 20)),
                     directions: Sequence[str] = ("h2d", "d2h"),
                     before_each: Optional[Callable[[], Any]] = None) -> Dict[str, float]:
    """GB/s of torch copies between a pinned uint8 CPU tensor and a tensor on `device`
    (non_blocking + synchronize), keyed f"{direction}_{label}_gbps": the median of 5 after
    a warm-up, per size and direction (h2d: pinned -> GPU, d2h: GPU -> pinned).
    before_each, when given, is called before every copy, warm-up included (node_loads.py:
    a barrier, so that every GPU's process copies at once)."""
    import torch

    largest = max(n for _, n in sizes)
    host = torch.empty(largest, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(largest, dtype=torch.uint8, device=device)
    out: Dict[str, float] = {}
    for label, nbytes in sizes:
        for direction in directions:
            dst, src = (dev, host) if direction == "h2d" else (host, dev)
            times = []
            for i in range(6):  # The first is a warm-up.
                torch.cuda.synchronize(dev.device)
                if before_each is not None:
                    before_each()
                t0 = time.perf_counter()
                dst[:nbytes].copy_(src[:nbytes], non_blocking=True)
                torch.cuda.synchronize(dev.device)
                if i:
                    times.append(time.perf_counter() - t0)
            out[f"{direction}_{label}_gbps"] = nbytes / statistics.median(times) / 1e9
    del host, dev
    torch.cuda.empty_cache()
    return out


def wait_ok(session: Any, job: int, what: str, timeout: float = 120.0) -> float:
    """Waits for a job that must succeed (RuntimeError naming `what` if it failed); returns
    the daemon's own time for it (JobCompletion.elapsed_us, in s; 0 if not reported)."""
    c = session.wait_job(job, timeout=timeout)
    if not c.ok:
        raise RuntimeError(f"{what} failed: blocks {list(c.failed_blocks)[:8]}: {c.error}")
    return getattr(c, "elapsed_us", 0) / 1e6
