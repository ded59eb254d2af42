"""SGLang's real host KV pools (MHA, MLA) on the CPU, and storage configs, for the tests.

Two SGLang generations are supported, told apart by what they have (never by version):
- 0.5.23 (.venv-sglang): host pools are built from the device pool's buffer descriptions
  (sglang.srt.mem_cache.device_pool_info) and take their exact capacity in tokens.
- 0.5.17 to 0.5.22 (.sglang-matrix on PYTHONPATH, scripts/sglang_versions.txt): host pools
  take the device pool itself (a real MHATokenToKVPool / MLATokenToKVPool, here on the CPU) and size themselves
  as int(device tokens * host_to_device_ratio) // page_size + 1 pages.
"""
from __future__ import annotations

import warnings
from typing import Any, List, Optional

warnings.filterwarnings("ignore", message=".*support.*currently.*")  # sglang's CPU notices

import torch  # noqa: E402
from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig  # noqa: E402
from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost  # noqa: E402
from sglang.srt.mem_cache.pool_host.mla import MLATokenToKVPoolHost  # noqa: E402

try:  # SGLang 0.5.23: host pools take the device pool's buffer descriptions.
    from sglang.srt.mem_cache.device_pool_info import (KVBufferLayout, KVBuffers,
                                                       MHABufferInfo, MLABufferInfo)
    HOST_POOLS_TAKE_BUFFER_INFO = True
except ImportError:  # SGLang 0.5.17 to 0.5.22: host pools take the device pool object.
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, MLATokenToKVPool
    HOST_POOLS_TAKE_BUFFER_INFO = False

LAYOUTS = ("layer_first", "page_first", "page_first_direct")
PAGE = 16          # tokens per page
LAYERS = 4
HEADS = 2
HEAD_DIM = 64
MLA_DIM = 576      # kv_lora_rank 512 + rope 64
DEVICE_TOKENS = 256


def _ptrs(tensors) -> torch.Tensor:
    return torch.tensor([t.data_ptr() for t in tensors], dtype=torch.uint64)


def make_pool(kind: str = "mha", layout: str = "page_first", pages: int = 32,
              dtype: torch.dtype = torch.bfloat16, layers: int = LAYERS, heads: int = HEADS,
              head_dim: int = HEAD_DIM, page: int = PAGE) -> Any:
    """A real MHATokenToKVPoolHost / MLATokenToKVPoolHost of exactly `pages` pages on the
    CPU (device buffers are CPU tensors: only the host side is exercised)."""
    if kind not in ("mha", "mla"):
        raise ValueError(kind)
    make = _make_pool_from_buffer_info if HOST_POOLS_TAKE_BUFFER_INFO else \
        _make_pool_from_device_pool
    pool = make(kind, layout, pages, dtype, layers, heads, head_dim, page)
    assert pool.size == pages * page, (pool.size, pages, page)
    return pool


def _make_pool_from_buffer_info(kind, layout, pages, dtype, layers, heads, head_dim, page):
    cpu = torch.device("cpu")
    common = dict(host_to_device_ratio=2.0, host_size=0, page_size=page, layout=layout,
                  pin_memory=False, device="cpu", device_capacity_tokens=DEVICE_TOKENS,
                  start_layer=0, end_layer=layers, host_token_capacity=pages * page)
    if kind == "mha":
        k = tuple(torch.zeros(DEVICE_TOKENS, heads, head_dim, dtype=dtype) for _ in range(layers))
        v = tuple(torch.zeros(DEVICE_TOKENS, heads, head_dim, dtype=dtype) for _ in range(layers))
        info = MHABufferInfo(
            buffers=KVBuffers(k=k, v=v, k_data_ptrs=_ptrs(k), v_data_ptrs=_ptrs(v),
                              layout=KVBufferLayout.NHD),
            page_size=page, head_num=heads, head_dim=head_dim, v_head_dim=head_dim,
            dtype=dtype, device=cpu)
        pool = MHATokenToKVPoolHost(info, **common)
    else:
        kv = tuple(torch.zeros(DEVICE_TOKENS, 1, MLA_DIM, dtype=dtype) for _ in range(layers))
        info = MLABufferInfo(buffers=kv, data_ptrs=_ptrs(kv), layer_indices=tuple(range(layers)),
                             device_layer_num=layers, page_size=page, kv_lora_rank=512,
                             qk_rope_head_dim=64, kv_cache_dim=MLA_DIM, dtype=dtype, device=cpu)
        pool = MLATokenToKVPoolHost(info, target_layer_num=layers, **common)
    pool._test_keepalive = info  # the device tensors the pool points at
    return pool


def _make_pool_from_device_pool(kind, layout, pages, dtype, layers, heads, head_dim, page):
    # The host pool has int(DEVICE_TOKENS * ratio) // page + 1 pages: aim the product at the
    # middle of page `pages - 1`, clear of float rounding on either side.
    ratio = ((pages - 1) * page + page / 2) / DEVICE_TOKENS
    common = dict(host_to_device_ratio=ratio, host_size=0, page_size=page, layout=layout,
                  pin_memory=False, device="cpu")
    if kind == "mha":
        device_pool = MHATokenToKVPool(DEVICE_TOKENS, page, dtype, head_num=heads,
                                       head_dim=head_dim, layer_num=layers, device="cpu",
                                       enable_memory_saver=False)
        pool = MHATokenToKVPoolHost(device_pool, **common)
    else:
        device_pool = MLATokenToKVPool(DEVICE_TOKENS, page, dtype, kv_lora_rank=512,
                                       qk_rope_head_dim=64, layer_num=layers,
                                       device="cpu", enable_memory_saver=False)
        pool = MLATokenToKVPoolHost(device_pool, **common)
    return pool  # (the host pool keeps its device_pool)


def make_config(extra: Optional[dict] = None, *, mla: bool = False, tp_rank: int = 0,
                tp_size: int = 1, pp_rank: int = 0, pp_size: int = 1,
                model: Optional[str] = "kvstrata-test/tiny", metrics: bool = True,
                endpoint: Optional[str] = None) -> HiCacheStorageConfig:
    """SGLang's HiCacheStorageConfig as the cache controller builds it for the dynamic backend."""
    cfg = {"backend_name": "kvstrata", "module_path": "kvstrata_sglang",
           "class_name": "KVStrataStorage", "interface_v1": 1}
    if endpoint is not None:
        cfg["endpoint"] = endpoint
    cfg.update(extra or {})
    return HiCacheStorageConfig(tp_rank=tp_rank, tp_size=tp_size, pp_rank=pp_rank,
                                pp_size=pp_size, attn_cp_rank=0, attn_cp_size=1,
                                is_mla_model=mla, enable_storage_metrics=metrics,
                                is_page_first_layout=False, model_name=model, extra_config=cfg)


def alloc_pages(pool: Any, n: int) -> torch.Tensor:
    """Host indices of n pages (n * page_size token indices), from the pool's allocator."""
    idx = pool.alloc(n * pool.page_size)
    assert idx is not None, "host pool is full"
    return idx


def fill_pages(pool: Any, indices: torch.Tensor, seed: int) -> None:
    """Random bytes in every page of `indices` (deterministic per seed and page number)."""
    for p, start in enumerate(indices[:: pool.page_size].tolist()):
        page = pool.get_data_page(start, flat=False)
        gen = torch.Generator().manual_seed(seed * 100_003 + p)
        raw = torch.randint(0, 256, (page.numel() * page.element_size(),), dtype=torch.uint8,
                            generator=gen)
        page.view(torch.uint8).copy_(raw.view(page.view(torch.uint8).shape))


def page_bytes(pool: Any, indices: torch.Tensor) -> List[bytes]:
    """The bytes of each page of `indices`, in the pool's flat data page order."""
    return [pool.get_data_page(s, flat=True).view(torch.uint8).numpy().tobytes()
            for s in indices[:: pool.page_size].tolist()]


def keys_for(prefix: str, n: int) -> List[str]:
    """n SGLang-style page hashes (64 hex characters) derived from prefix."""
    import hashlib

    out, prior = [], prefix.encode()
    for i in range(n):
        prior = hashlib.sha256(prior + i.to_bytes(4, "little")).digest()
        out.append(prior.hex())
    return out
