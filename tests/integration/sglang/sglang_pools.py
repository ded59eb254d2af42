"""SGLang's real host KV pools (MHA, MLA) on the CPU, and storage configs, for the tests."""
from __future__ import annotations

import warnings
from typing import Any, List, Optional

warnings.filterwarnings("ignore", message=".*support.*currently.*")  # sglang's CPU notices

import torch  # noqa: E402
from sglang.srt.mem_cache.device_pool_info import (KVBufferLayout, KVBuffers,  # noqa: E402
                                                   MHABufferInfo, MLABufferInfo)
from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig  # noqa: E402
from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost  # noqa: E402
from sglang.srt.mem_cache.pool_host.mla import MLATokenToKVPoolHost  # noqa: E402

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
    """A real MHATokenToKVPoolHost / MLATokenToKVPoolHost of `pages` pages on the CPU
    (device buffers are CPU tensors: only the host side is exercised)."""
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
    elif kind == "mla":
        kv = tuple(torch.zeros(DEVICE_TOKENS, 1, MLA_DIM, dtype=dtype) for _ in range(layers))
        info = MLABufferInfo(buffers=kv, data_ptrs=_ptrs(kv), layer_indices=tuple(range(layers)),
                             device_layer_num=layers, page_size=page, kv_lora_rank=512,
                             qk_rope_head_dim=64, kv_cache_dim=MLA_DIM, dtype=dtype, device=cpu)
        pool = MLATokenToKVPoolHost(info, target_layer_num=layers, **common)
    else:
        raise ValueError(kind)
    pool._test_keepalive = info  # the device tensors the pool points at
    return pool


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
