"""SGLang's real hybrid host pools on the CPU, for the v2 tests: a HostPoolGroup of the
full-attention KV pool (the anchor) with a sliding-window KV pool (an MHA/MLA host pool of
fewer layers) and/or a MambaPoolHost, built the way SGLang's hybrid_pool_assembler builds
them (SGLang 0.5.17: memory_pool_host.HostPoolGroup, MambaPoolHost over a real MambaPool;
0.5.23: pool_host.group.HostPoolGroup, MambaPoolHost over MambaStateBufferInfo; the releases
between moved one piece at a time, so each is found by what SGLang has)."""
from __future__ import annotations

from typing import Any, Dict, Optional

import torch

from sglang_pools import HOST_POOLS_TAKE_BUFFER_INFO, make_pool

# Where each class lives, found by importing (SGLang moved them one release at a time).
try:  # SGLang 0.5.19 and later
    from sglang.srt.mem_cache.pool_host.group import HostPoolGroup, PoolEntry
except ImportError:  # 0.5.17, 0.5.18
    from sglang.srt.mem_cache.memory_pool_host import HostPoolGroup, PoolEntry
try:  # SGLang 0.5.18 and later
    from sglang.srt.mem_cache.pool_host.mamba import MambaPoolHost
except ImportError:  # 0.5.17
    from sglang.srt.mem_cache.memory_pool_host import MambaPoolHost
try:  # SGLang 0.5.22 and later: MambaPoolHost over the state buffers' description
    from sglang.srt.mem_cache.device_pool_info import MambaStateBufferInfo
    MAMBA_TAKES_BUFFER_INFO = True
except ImportError:  # 0.5.17 to 0.5.21: MambaPoolHost over a real MambaPool
    from sglang.srt.configs.mamba_utils import (Mamba2CacheParams, Mamba2StateDType,
                                                Mamba2StateShape)
    from sglang.srt.mem_cache.memory_pool import MambaPool
    MAMBA_TAKES_BUFFER_INFO = False

from sglang.srt.mem_cache.hicache_storage import PoolName  # noqa: E402

MAMBA_LAYERS = 3
MAMBA_DEVICE_SLOTS = 8      # the host pool gets 2x + 1 = 17 state slots
SWA_LAYERS = 2


def make_mamba_pool(layers: int = MAMBA_LAYERS, heads: int = 4, head_dim: int = 16,
                    state: int = 8, temporal_dtype: torch.dtype = torch.float32,
                    conv_dtype: torch.dtype = torch.bfloat16, layout: str = "page_first"):
    """A real MambaPoolHost (Mamba2 geometry: temporal [heads, head_dim, state], one conv
    state [conv_dim, kernel - 1]) of 2 * MAMBA_DEVICE_SLOTS + 1 slots on the CPU."""
    if MAMBA_TAKES_BUFFER_INFO:
        slots = MAMBA_DEVICE_SLOTS + 1
        conv_dim = 64 + 2 * state
        info = MambaStateBufferInfo(
            temporal=torch.zeros(layers, slots, heads, head_dim, state, dtype=temporal_dtype),
            conv=(torch.zeros(layers, slots, conv_dim, 3, dtype=conv_dtype),))
        pool = MambaPoolHost(info, 2.0, 0, device_capacity=MAMBA_DEVICE_SLOTS,
                             pin_memory=False, device="cpu", layout=layout)
        pool._test_keepalive = info
        return pool
    shape = Mamba2StateShape.create(tp_world_size=1, intermediate_size=64, n_groups=1,
                                    num_heads=heads, head_dim=head_dim, state_size=state,
                                    conv_kernel=4)
    params = Mamba2CacheParams(shape=shape, layers=list(range(layers)),
                               dtype=Mamba2StateDType(conv=conv_dtype,
                                                      temporal=temporal_dtype))
    device_pool = MambaPool(size=MAMBA_DEVICE_SLOTS, spec_state_size=0, cache_params=params,
                            mamba_layer_ids=list(range(layers)), device="cpu")
    return MambaPoolHost(device_pool, 2.0, 0, pin_memory=False, device="cpu", layout=layout)


def make_group(kind: str = "mha", layout: str = "page_first", swa: bool = True,
               mamba: bool = False, pages: int = 32) -> Dict[str, Any]:
    """{"group": HostPoolGroup, "kv": ..., "swa": ..., "mamba": ...} (absent pools: None),
    the KV pool the group's anchor, as SGLang builds a hybrid model's host pools."""
    kv = make_pool(kind, layout, pages=pages)
    swa_pool = make_pool(kind, layout, pages=pages, layers=SWA_LAYERS) if swa else None
    mamba_pool = make_mamba_pool(layout=layout if layout != "layer_first" else "page_first") \
        if mamba else None
    entries = [PoolEntry(name=PoolName.KV, host_pool=kv, device_pool=None,
                         layer_mapper=lambda i: i, is_primary_index_anchor=True)]
    for name, pool in ((PoolName.SWA, swa_pool), (PoolName.MAMBA, mamba_pool)):
        if pool is not None:
            entries.append(PoolEntry(name=name, host_pool=pool, device_pool=None,
                                     layer_mapper=lambda i: i))
    return {"group": HostPoolGroup(entries), "kv": kv, "swa": swa_pool, "mamba": mamba_pool}


def register(backend, pools: Dict[str, Any]) -> None:
    """What SGLang's HybridCacheController.attach_storage_backend does: the group through
    register_mem_pool_host, then every entry through register_mem_host_pool_v2."""
    backend.register_mem_pool_host(pools["group"])
    for entry in pools["group"].entries:
        backend.register_mem_host_pool_v2(entry.host_pool, entry.name)
    hook = getattr(backend, "on_host_pools_registered", None)
    if hook is not None:  # SGLang 0.5.23 fires it after the burst
        hook()


def slot_bytes(pool: Any, slots: torch.Tensor) -> list:
    """The bytes of each Mamba state slot (get_data_page order: temporal, conv...)."""
    return [pool.get_data_page(int(s), flat=True).view(torch.uint8).numpy().tobytes()
            for s in slots.tolist()]


def fill_slots(pool: Any, slots: torch.Tensor, seed: int) -> None:
    for i, s in enumerate(slots.tolist()):
        page = pool.get_data_page(int(s), flat=True)
        gen = torch.Generator().manual_seed(seed * 7919 + i)
        raw = torch.randint(0, 256, (page.numel(),), dtype=torch.uint8, generator=gen)
        pool.set_from_flat_data_page(int(s), raw)


def transfer(name: Any, keys: Optional[list] = None, host_indices=None,
             policy: str = "trailing_pages"):
    from sglang.srt.mem_cache.hicache_storage import PoolHitPolicy, PoolTransfer

    return PoolTransfer(name=name, keys=keys, host_indices=host_indices,
                        hit_policy=PoolHitPolicy(policy))
