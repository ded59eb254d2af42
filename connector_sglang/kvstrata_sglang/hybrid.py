"""A hybrid model's extra HiCache host pools (SGLang's v2 storage interface), for KVStrata.

SGLang's HybridCacheController keeps, beside the full-attention KV pool (the "anchor",
registered with register_mem_pool_host), one host pool per extra state and registers each
with register_mem_host_pool_v2(pool, name):
- "swa": the sliding-window layers' KV, an MHA (or MLA) host pool of the same page size,
  one page per page hash; a prefix needs only the pages of its last window.
- "mamba": linear-attention / SSM state, a MambaPoolHost of one-slot "pages" (temporal
  state, then each conv state, of every Mamba layer); a prefix needs only the state after
  its last page, stored under that page's hash.
Each gets its own namespace (kv_group "sglang-swa" / "sglang-mamba ..."), so its blocks
never meet the full-attention pool's, and its own geometry: the SWA pool's layers, heads
and layout; the Mamba state's shapes and dtypes (an opaque block of exactly those bytes).
Mamba state is split over tensor-parallel ranks even for an MLA model (every rank stores
its own, as SGLang's controller backs it up on every rank); SWA KV follows the KV pool.

Any other pool (DSA indexer, DeepSeek V4 compressed pools, draft pools, ...) is refused
at registration with one line naming it: nothing is ever loaded that was not stored.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Set

from .layout import (DTYPES, PageLayout, _dtype_name, cp_suffix, describe_pool,
                     model_tag)
from .options import BackendOptions

SWA, MAMBA, KV = "swa", "mamba", "kv"
SUPPORTED = (SWA, MAMBA)
MAX_KV_GROUP = 128
# PoolHitPolicy values (SGLang 0.5.17 and 0.5.23).
ALL_PAGES, TRAILING_PAGES = "all_pages", "trailing_pages"


@dataclass(frozen=True)
class ExtraPool:
    """One registered extra host pool: its namespace key, layout and who writes it."""

    name: str
    key: str                 # the DaemonLink's namespace key
    layout: PageLayout
    host: Any                # the host pool (get_page_buffer_meta names its pages' pieces)
    every_rank_writes: bool  # True: rank-sharded state (Mamba), written on every TP rank


def pool_name(name: Any) -> str:
    """SGLang's PoolName (a str enum) or a plain string, as its value."""
    return str(getattr(name, "value", name))


def describe_extra_pool(name: str, host_pool: Any, storage_config: Any,
                        options: BackendOptions, anchor: PageLayout) -> ExtraPool:
    """The ExtraPool of SGLang host pool `name`; ValueError (one line) for what this
    backend cannot store."""
    kind = type(host_pool).__name__
    if name not in SUPPORTED:
        raise ValueError(f"kvstrata: SGLang's {name!r} host pool ({kind}) is not supported by "
                         f"this backend (it stores the KV pool and the {' and '.join(SUPPORTED)} "
                         "pools only); serve this model with another HiCache storage backend "
                         "or without --hicache-storage-backend")
    classes = {c.__name__ for c in type(host_pool).__mro__}
    wanted = {SWA: ("MHATokenToKVPoolHost", "MLATokenToKVPoolHost"),
              MAMBA: ("MambaPoolHost",)}[name]
    if not classes.intersection(wanted):
        raise ValueError(f"kvstrata: SGLang's {name!r} host pool is a {kind}, not a "
                         f"{' / '.join(wanted)}; this backend cannot store it; serve this "
                         "model with another HiCache storage backend or without "
                         "--hicache-storage-backend")
    if name == SWA:
        layout = describe_pool(host_pool, storage_config, options, kv_group="sglang-swa")
        if layout.page_size != anchor.page_size:
            raise ValueError(f"kvstrata: the SWA host pool has pages of {layout.page_size} "
                             f"tokens, the KV pool of {anchor.page_size}; they must be equal")
        return ExtraPool(SWA, f"pool:{SWA}", layout, host_pool, every_rank_writes=False)
    return ExtraPool(MAMBA, f"pool:{MAMBA}", describe_mamba_pool(host_pool, storage_config,
                                                                options),
                     host_pool, every_rank_writes=True)


def describe_mamba_pool(pool: Any, storage_config: Any, options: BackendOptions) -> PageLayout:
    """The PageLayout of a MambaPoolHost: one state slot (page_size 1) = one block of the
    pieces get_page_buffer_meta names (temporal, then conv 0..n), checked against the
    pool's shapes and dtypes."""
    kind = type(pool).__name__
    for attr in ("temporal_state_shape", "conv_state_shapes", "num_mamba_layers",
                 "temporal_dtype", "conv_dtype"):
        if not hasattr(pool, attr):
            raise ValueError(f"kvstrata: the 'mamba' host pool ({kind}) has no {attr}; "
                             "not a MambaPoolHost this backend knows")
    if int(pool.page_size) != 1:
        raise ValueError(f"kvstrata: the Mamba host pool has page_size {pool.page_size}; "
                         "SGLang's MambaPoolHost keeps one state per slot (1)")
    if getattr(pool, "slot_state_device_tensors", None):
        raise ValueError("kvstrata: the Mamba host pool carries extra slot side states "
                         "(slot_state_device_tensors), which SGLang's zero-copy page "
                         "description leaves out; this backend cannot store them whole")
    layers = int(pool.num_mamba_layers)
    t_shape = tuple(int(x) for x in pool.temporal_state_shape)
    c_shapes = [tuple(int(x) for x in s) for s in pool.conv_state_shapes]
    t_bytes = _numel(t_shape) * layers * pool.temporal_dtype.itemsize
    pieces = ([t_bytes] if _numel(t_shape) > 0 else []) + \
        [_numel(s) * layers * pool.conv_dtype.itemsize for s in c_shapes]

    import torch

    try:
        ptrs, sizes = pool.get_page_buffer_meta(torch.arange(1, dtype=torch.int64))
    except (ValueError, NotImplementedError) as err:
        raise ValueError(f"kvstrata: the Mamba host pool cannot describe its slots: {err}") \
            from None
    sizes = tuple(int(s) for s in sizes)
    if len(ptrs) != len(sizes) or list(sizes) != pieces:
        raise ValueError(f"kvstrata: {kind} describes a state slot as pieces {list(sizes)}, "
                         f"but its shapes give {pieces}; this pool format is not supported")
    offsets, at = [], 0
    for s in sizes:
        offsets.append(at)
        at += s
    geometry = (f"layers={layers};t={_dtype_name(pool.temporal_dtype)}{list(t_shape)};"
                + ";".join(f"c{i}={_dtype_name(pool.conv_dtype)}{list(s)}"
                           for i, s in enumerate(c_shapes))).replace(" ", "")
    group = f"sglang-mamba {geometry}"
    if len(group) > MAX_KV_GROUP:
        group = "sglang-mamba sha256:" + hashlib.sha256(geometry.encode()).hexdigest()[:40]
    spec: Dict[str, Any] = dict(
        engine="sglang", model=model_tag(storage_config, options) + cp_suffix(storage_config),
        dtype=DTYPES.get(_dtype_name(pool.temporal_dtype), "uint8"), num_layers=layers,
        num_kv_heads=1, head_size=1, tokens_per_block=1,
        # Mamba state is split over TP ranks even when the model's MLA KV is not.
        tp_size=int(storage_config.tp_size), tp_rank=int(storage_config.tp_rank),
        pp_size=int(storage_config.pp_size), pp_rank=int(storage_config.pp_rank),
        kv_layout="opaque", opaque_block_bytes=at, salt=options.salt, kv_group=group)
    return PageLayout(spec=spec, layout=str(pool.layout), is_mla=False, page_size=1,
                      pool_tokens=int(pool.size), bytes_per_page=at, segment_sizes=sizes,
                      segment_offsets=tuple(offsets), num_layers=layers,
                      legacy_swaps_kv_and_layer=False)


def _numel(shape: Any) -> int:
    n = 1
    for x in shape:
        n *= int(x)
    return n


# ---------------------------------------------------------------------- hits

Lookup = Callable[[int, int], int]  # (lo, hi) -> leading keys of keys[lo:hi] present


def pool_restorable(policy: str, window: int, limit: int, lookup: Lookup) -> Set[int]:
    """The prefix lengths p in [1, limit] (pages) whose state this pool can restore, as
    SGLang's own file backend counts them: ALL_PAGES needs pages [0, p); TRAILING_PAGES
    needs only the last `window` pages [p - window, p) (SWA: the window; Mamba: 1, the
    state after page p - 1). Any other policy (BLOCK_GROUPS) restores nothing.

    TRAILING_PAGES scans down from `limit`: a window that is all there makes p restorable
    (next p - 1); one whose first missing key is m rules out every p in (m, p] (next m).
    One lookup per restorable length or per jump."""
    if limit <= 0:
        return set()
    if policy == ALL_PAGES:
        return set(range(1, lookup(0, limit) + 1))
    if policy != TRAILING_PAGES:
        return set()
    window = max(1, int(window))
    out, p = set(), limit
    while p > 0:
        lo = max(0, p - window)
        h = lookup(lo, p)
        if h >= p - lo:
            out.add(p)
            p -= 1
        else:
            p = lo + h
    return out


def fold_hits(kv_pages: int, transfers: List[Any], lookups: Dict[str, Optional[Lookup]],
              ) -> tuple:
    """(final pages, {pool name: its own boundary}, sorted restorable prefix lengths) over
    the KV prefix and every transfer's pool: a length counts only if every pool restores it
    (a pool without a lookup, i.e. not registered, restores nothing)."""
    restorable = set(range(1, kv_pages + 1))
    hits: Dict[Any, int] = {}
    for t in transfers:
        if not restorable:
            break
        lookup = lookups.get(pool_name(t.name))
        policy = pool_name(t.hit_policy)
        got = set() if lookup is None else pool_restorable(
            policy, len(t.keys) if t.keys else 1, max(restorable), lookup)
        if got:
            hits[t.name] = max(got)
        restorable &= got
    ordered = sorted(restorable)
    return (ordered[-1] if ordered else 0), hits, ordered
