"""Helpers of the GPU tests: a kvstratad subprocess, Llama-3.1-8B KV caches in vLLM's
layouts (their pieces from the vLLM connector's kvstrata_vllm.kv_layouts, imported from
connector_vllm/ like connector_sglang/'s kvstrata_sglang: neither needs its engine), random
fills, snapshots and byte-exact comparisons.

Imports neither torch nor a GPU at import time: the GPU test modules call require_gpu()
first, which skips them (module level) when torch or a CUDA device is missing.
"""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "tests" / "integration" / "python"))
sys.path.insert(0, str(REPO / "connector_vllm"))    # kvstrata_vllm.kv_layouts
sys.path.insert(0, str(REPO / "connector_sglang"))  # kvstrata_sglang.device_pool
import kvs_testing  # noqa: E402  (the daemon launcher shared with the integration tests)
from kvs_testing import wait_until  # noqa: E402,F401  (re-exported for the GPU tests)

DAEMON_SETTINGS = {"l1.capacity": "8GiB", "l1.slab_size": "64MiB", "l2.enabled": "false"}

# Llama-3.1-8B: 32 layers, 8 KV heads of 128, bf16, vLLM's 16 tokens per block.
LAYERS, KV_HEADS, HEAD_SIZE, TOKENS = 32, 8, 128, 16
DTYPE_BYTES = 2
BLOCK_BYTES = 2 * LAYERS * KV_HEADS * HEAD_SIZE * TOKENS * DTYPE_BYTES  # 2 MiB
LAYOUT_NS = {"nhd": "vllm_nhd", "hnd": "vllm_hnd", "flashinfer": "vllm_nhd",
             "cross_layer": "vllm_cross_layer"}


def require_gpu() -> None:
    """Skip the calling test module unless torch and a CUDA device are present (fail
    instead when $KVSTRATA_REQUIRE_GPU=1, as scripts/gpu_run.sh sets on the GPU machine)."""
    def missing(why: str) -> None:
        if os.environ.get("KVSTRATA_REQUIRE_GPU") == "1":
            pytest.fail(f"{why}, but KVSTRATA_REQUIRE_GPU=1", pytrace=False)
        pytest.skip(f"{why}: GPU tests skipped", allow_module_level=True)

    try:
        import torch
    except ImportError:
        missing("torch is not installed")
    if not torch.cuda.is_available() or torch.cuda.device_count() < 1:
        missing("no CUDA device")


# ---------------------------------------------------------------------- daemon


class Daemon(kvs_testing.Daemon):
    """A kvstratad for the GPU tests (tests/integration/python's launcher) in a temporary
    directory of its own, with an 8 GiB L1 unless `settings` say otherwise."""

    start_timeout_s = 60.0  # populating + pinning 8 GiB takes a few seconds
    stop_timeout_s = 30.0

    def __init__(self, settings: Optional[Dict[str, str]] = None) -> None:
        super().__init__(kvs_testing.short_tmpdir(), {**DAEMON_SETTINGS, **(settings or {})})

    def cleanup(self) -> None:
        shutil.rmtree(self.workdir, ignore_errors=True)


def managed_daemon(settings: Optional[Dict[str, str]] = None):
    """Generator for fixtures: a started daemon, stopped (exit 0 expected) afterwards."""
    yield from kvs_testing.run_daemon(Daemon(settings))


def llama_spec(layout: str = "nhd", salt: str = "") -> Dict[str, Any]:
    """Namespace spec fields of Llama-3.1-8B KV in a vLLM layout."""
    return dict(engine="vllm", model="meta-llama/Llama-3.1-8B", dtype="bfloat16",
                num_layers=LAYERS, num_kv_heads=KV_HEADS, head_size=HEAD_SIZE,
                tokens_per_block=TOKENS, kv_layout=LAYOUT_NS[layout], salt=salt)


def l1_used_bytes(client: Any) -> int:
    import kvstrata

    return next(t.used_bytes for t in client.list_tiers().tiers if t.tier == kvstrata.pb.TIER_L1_DRAM)



# ---------------------------------------------------------------------- KV caches


class KvCache:
    """Llama-3.1-8B KV cache of num_blocks blocks in one of vLLM's layouts, on one GPU.

    layout: "nhd" (per layer [2, N, 16, 8, 128]), "hnd" (per layer logical
    [2, N, 16, 8, 128] over physical [2, N, 8, 16, 128], vLLM's stride order),
    "flashinfer" (per layer [N, 2, 16, 8, 128]) or "cross_layer" (one tensor
    [N, 32, 2, 16, 8, 128]). `blocks(ids)` gathers the raw bytes of blocks in memory order
    (uint8, [len(ids), BLOCK_BYTES]) for comparisons.
    """

    def __init__(self, layout: str, num_blocks: int, device: int = 0) -> None:
        import torch

        self.layout = layout
        self.num_blocks = num_blocks
        self.device = torch.device("cuda", device)
        n, dt = num_blocks, torch.bfloat16
        kw = dict(dtype=dt, device=self.device)
        if layout == "nhd":
            self.layers = [torch.empty(2, n, TOKENS, KV_HEADS, HEAD_SIZE, **kw) for _ in range(LAYERS)]
        elif layout == "hnd":
            self.layers = [torch.empty(2, n, KV_HEADS, TOKENS, HEAD_SIZE, **kw).permute(0, 1, 3, 2, 4)
                           for _ in range(LAYERS)]
        elif layout == "flashinfer":
            self.layers = [torch.empty(n, 2, TOKENS, KV_HEADS, HEAD_SIZE, **kw) for _ in range(LAYERS)]
        elif layout == "cross_layer":
            self.cross = torch.empty(n, LAYERS, 2, TOKENS, KV_HEADS, HEAD_SIZE, **kw)
            self.layers = []
        else:
            raise ValueError(layout)

    def pieces(self) -> List[Any]:
        """The cache as kvstrata pieces, by the namespace's kv_layout (kvstrata_vllm)."""
        from kvstrata_vllm.kv_layouts import kv_cache_pieces

        return kv_cache_pieces(self.kv_caches, LAYOUT_NS[self.layout])

    @property
    def kv_caches(self) -> Any:
        if self.layout == "cross_layer":
            return self.cross
        return {f"model.layers.{i}.self_attn.attn": t for i, t in enumerate(self.layers)}

    def blocks(self, ids: Sequence[int]) -> Any:
        """Raw bytes of the blocks (memory order of the pieces), [len(ids), BLOCK_BYTES]."""
        import torch

        idx = torch.as_tensor(list(ids), dtype=torch.long, device=self.device)
        parts = []
        for raw, dim in self._raw_writable():
            if dim == 0:
                parts.append(raw.index_select(0, idx))
            else:
                parts.append(raw.index_select(1, idx).transpose(0, 1).reshape(len(ids), -1))
        return torch.cat(parts, dim=1)

    def fill_random(self, ids: Sequence[int], generator: Any = None) -> None:
        """Random bytes (every bit pattern, NaNs included) into the blocks."""
        import torch

        self._fill(ids, lambda shape: torch.randint(0, 256, shape, dtype=torch.uint8,
                                                    device=self.device, generator=generator))

    def poison(self, ids: Sequence[int], byte: int = 0xA5) -> None:
        import torch

        self._fill(ids, lambda shape: torch.full(shape, byte, dtype=torch.uint8, device=self.device))

    def _fill(self, ids: Sequence[int], make) -> None:
        import torch

        if not len(ids):
            return
        idx = torch.as_tensor(list(ids), dtype=torch.long, device=self.device)
        for raw, dim in self._raw_writable():
            shape = list(raw.shape)
            shape[dim] = len(ids)
            raw.index_copy_(dim, idx, make(tuple(shape)))

    def _raw_writable(self) -> List[Tuple[Any, int]]:
        """(uint8 view of the real memory, dim of its blocks) per region: [N, bytes] or
        [2, N, piece] (K/V first, physical order: the HND view's storage order)."""
        import torch

        if self.layout == "cross_layer":
            return [(self.cross.view(torch.uint8).view(self.num_blocks, -1), 0)]
        out = []
        for t in self.layers:
            if self.layout == "flashinfer":
                out.append((t.view(torch.uint8).view(self.num_blocks, -1), 0))
            else:
                phys = t.permute(0, 1, 3, 2, 4) if self.layout == "hnd" else t
                assert phys.is_contiguous()
                out.append((phys.view(torch.uint8).view(2, self.num_blocks, -1), 1))
        return out


def random_keys(rng: Any, count: int) -> List[bytes]:
    """count random 32-byte keys (block hashes)."""
    return [rng.randbytes(32) for _ in range(count)]


def assert_blocks_equal(actual: Any, expected: Any, what: str) -> None:
    """Byte-exact comparison of [n, BLOCK_BYTES] uint8 tensors, naming the first bad block."""
    import torch

    if torch.equal(actual, expected):
        return
    bad = (actual != expected).any(dim=1).nonzero().flatten().tolist()
    raise AssertionError(f"{what}: {len(bad)} of {actual.shape[0]} blocks differ "
                         f"(first at rows {bad[:8]})")


def block_digests(cache: KvCache, ids: Sequence[int]) -> List[str]:
    """sha256 of each block's bytes (for comparisons across processes)."""
    import hashlib

    data = cache.blocks(ids).cpu().numpy()
    return [hashlib.sha256(row.tobytes()).hexdigest() for row in data]


def check_completion(c: Any, what: str) -> None:
    assert c.ok and not list(c.failed_blocks), (
        f"{what}: job {c.job_id} failed blocks {list(c.failed_blocks)[:16]}: {c.error!r}")


def roundtrip_rounds(session: Any, ns: Any, reg: Any, cache: KvCache, rng: Any, rounds: int,
                     max_blocks: int = 64, history: int = 4, timeout: float = 60.0) -> Dict[str, int]:
    """Random store/load rounds with byte-exact checks; returns counters.

    Each round fills fresh random blocks, records an IPC event and stores them (the daemon
    must wait for the fill through the event), and at the same time loads the keys of an
    earlier round into other, poisoned block ids; after both completions the loaded bytes
    must equal that round's snapshot exactly.
    """
    import torch

    stored: List[Tuple[List[bytes], Any]] = []  # (keys, bytes snapshot) of recent rounds
    counters = {"rounds": 0, "stored_blocks": 0, "loaded_blocks": 0}
    n_blocks = cache.num_blocks
    for _ in range(rounds):
        n_store = rng.choice([1, 7, max_blocks // 2, max_blocks])
        old = rng.choice(stored) if stored else None
        n_load = len(old[0]) if old else 0
        ids = rng.sample(range(n_blocks), n_store + n_load)
        src, dst = ids[:n_store], ids[n_store:]
        keys = random_keys(rng, n_store)

        cache.fill_random(src)                     # "the forward pass" on the current stream
        event = reg.record_event()
        snapshot = cache.blocks(src)               # same stream: after the fill
        jobs = [session.submit_store(ns, reg, keys, src, event=event)]
        if old:
            cache.poison(dst)
            torch.cuda.current_stream().synchronize()  # the poison must land before the load
            jobs.append(session.submit_load(ns, reg, old[0], dst))
        done = session.wait_jobs(jobs, timeout=timeout)
        check_completion(done[jobs[0]], "store")
        if old:
            check_completion(done[jobs[1]], "load")
            assert_blocks_equal(cache.blocks(dst), old[1], f"round {counters['rounds']} load")
            counters["loaded_blocks"] += n_load
        cache.poison(src)
        stored.append((keys, snapshot))
        del stored[:-history]
        counters["rounds"] += 1
        counters["stored_blocks"] += n_store
    torch.cuda.synchronize()
    return counters


class _DeviceMemory:
    """__cuda_array_interface__ of a strided uint8 range (torch.as_tensor wraps it, no copy)."""

    def __init__(self, ptr: int, shape: Tuple[int, ...], strides: Tuple[int, ...]) -> None:
        self.__cuda_array_interface__ = {"shape": shape, "strides": strides, "typestr": "|u1",
                                         "data": (ptr, False), "version": 2}


def piece_views(desc: Any, device: Any) -> List[Any]:
    """Per piece, a uint8 [num_blocks, piece_bytes] tensor over the engine's memory, built
    only from the description (its addresses, strides and sizes)."""
    import torch

    return [torch.as_tensor(_DeviceMemory(p.address, (desc.num_blocks, p.piece_bytes),
                                          (p.block_stride, 1)), device=device)
            for p in desc.pieces]


def reference_store(desc: Any, device: Any, ids: Sequence[int]) -> Any:
    """What the daemon's slots must hold for these blocks: the pieces back to back."""
    import torch

    idx = torch.as_tensor(list(ids), dtype=torch.long, device=device)
    return torch.cat([v.index_select(0, idx) for v in piece_views(desc, device)], dim=1)


def reference_load(desc: Any, device: Any, ids: Sequence[int], slots: Any) -> None:
    """Write slots ([len(ids), block_bytes]) into the blocks, piece by piece."""
    import torch

    idx = torch.as_tensor(list(ids), dtype=torch.long, device=device)
    off = 0
    for p, v in zip(desc.pieces, piece_views(desc, device)):
        v.index_copy_(0, idx, slots[:, off:off + p.piece_bytes].contiguous())
        off += p.piece_bytes
