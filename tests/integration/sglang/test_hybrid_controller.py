"""SGLang's own HybridCacheController storage code driving the v2 calls: its backup
(_page_backup: batch_set_v2 for the extra pools, then the KV pages through batch_set_v1),
its storage hit query (_storage_hit_query: batch_exists_v2 with the trailing-page
transfers SGLang's SWA and Mamba components build for a prefetch: placeholder keys, one
per window page) and its prefetch transfer (_page_transfer: KV pages, then
_sync_trailing_keys and batch_get_v2 for the window ending at the hit), on a real
HostPoolGroup and a real kvstratad.

As in test_sglang_controller.py the controller is built without GPU streams, device pools
and process groups; only the attributes these methods read are set. Told apart by what
they have: SGLang 0.5.23's PrefetchOperation takes a request handle and acks each prefetch
(PrefetchAck with the extra pools' hits); 0.5.17's takes a request id and records the
extra pools' hits in pool_storage_result.
"""
from __future__ import annotations

import random
from queue import Queue
from types import SimpleNamespace
from typing import Iterator

import pytest
from kvs_testing import Daemon, run_daemon, short_tmpdir
from sglang.srt.mem_cache.hicache_storage import PoolHitPolicy, PoolName, PoolTransfer
from sglang.srt.mem_cache.hybrid_cache import hybrid_cache_controller as hcc
from sglang.srt.mem_cache.hybrid_cache.hybrid_cache_controller import (
    HybridCacheController, PrefetchOperation, StorageOperation)
try:
    from sglang.srt.mem_cache.utils import get_storage_hash_str
except ImportError:  # SGLang 0.5.17
    from sglang.srt.mem_cache.utils import get_hash_str as get_storage_hash_str
from sglang_hybrid_pools import fill_slots, make_group, register, slot_bytes
from sglang_pools import alloc_pages, fill_pages, make_config, page_bytes

ACKS = hasattr(hcc, "PrefetchAck")  # SGLang 0.5.23
WINDOW = 2  # SWA window in pages


@pytest.fixture(scope="module")
def daemon() -> Iterator[Daemon]:
    """64 MiB of L1 in 4 MiB slabs: one slab per block size (KV, SWA, Mamba)."""
    yield from run_daemon(Daemon(short_tmpdir(), {"l1.slab_size": "4MiB"}))


def controller(backend, group) -> HybridCacheController:
    c = HybridCacheController.__new__(HybridCacheController)
    c.page_size = group.page_size
    c.storage_backend = backend
    c.storage_backend_type = "dynamic"
    c.mem_pool_host = c.storage_host_pool = group
    c.page_get_func = c._page_get_zero_copy
    c.page_set_func = c._page_set_zero_copy
    c.prefetch_sync_queue = Queue()
    c.host_mem_release_queue = Queue()
    c.extra_host_mem_release_queues = {}
    c.has_draft = False
    c.storage_config = backend.storage_config  # 0.5.23: backup_skip reads it
    if not isinstance(getattr(HybridCacheController, "backup_skip", None), property):
        c.backup_skip = False  # 0.5.17: set by attach_storage_backend (MHA: every rank)
    c.is_kv_sharded = False
    c.get_hash_str = get_storage_hash_str
    return c


def prefetch_op(rid, tokens, transfers):
    if ACKS:
        return PrefetchOperation(SimpleNamespace(rid=rid), tokens, None, prefix_keys=[],
                                 pool_transfers=transfers)
    return PrefetchOperation(rid, tokens, None, prefix_keys=[], pool_transfers=transfers)


def window_transfers(p, swa_idx=None, slot=None):
    """What SGLang's SWA and Mamba components build for a prefetch (PREFETCH phase)."""
    swa_idx = alloc_pages(p["swa"], WINDOW) if swa_idx is None else swa_idx
    slot = p["mamba"].alloc(1) if slot is None else slot
    return [PoolTransfer(name=PoolName.SWA, host_indices=swa_idx,
                         keys=["__placeholder__"] * WINDOW,
                         hit_policy=PoolHitPolicy.TRAILING_PAGES),
            PoolTransfer(name=PoolName.MAMBA, host_indices=slot, keys=["__placeholder__"],
                         hit_policy=PoolHitPolicy.TRAILING_PAGES)]


def extra_hits(c, op):
    """The extra pools' pages the prefetch loaded, as this SGLang reports them."""
    if ACKS:
        acks = [c.prefetch_sync_queue.get_nowait() for _ in range(c.prefetch_sync_queue.qsize())]
        return {str(k): v for a in acks for k, v in (getattr(a, "pool_hits", None) or {}).items()}
    return {str(k): v for k, v in op.pool_storage_result.extra_pool_hit_pages.items()}


def test_sglang_hybrid_backup_query_prefetch(daemon, backends, salt):
    pages = 12
    rng = random.Random(7)
    tokens = [rng.randrange(32000) for _ in range(pages * 16)]
    cfg = lambda: make_config({"salt": salt}, endpoint=daemon.endpoint)  # noqa: E731

    # Instance A backs up two radix nodes of 6 pages each, as SGLang's components build
    # BACKUP_STORAGE transfers: SWA the node's last WINDOW pages, Mamba its last page.
    pa = make_group(swa=True, mamba=True, pages=pages + 8)
    a = controller(backends(cfg()), pa["group"])
    register(a.storage_backend, pa)
    hashes = get_storage_hash_str(tokens, None, page_size=16)
    kv = alloc_pages(pa["kv"], pages)
    fill_pages(pa["kv"], kv, 1)
    swa_src, mamba_src = {}, {}
    for node in (0, 1):
        lo, hi = node * 6, node * 6 + 6
        swa = alloc_pages(pa["swa"], WINDOW)
        fill_pages(pa["swa"], swa, 10 + node)
        slot = pa["mamba"].alloc(1)
        fill_slots(pa["mamba"], slot, 20 + node)
        swa_src[hi], mamba_src[hi] = page_bytes(pa["swa"], swa), slot_bytes(pa["mamba"], slot)
        op = StorageOperation(
            kv[lo * 16: hi * 16], tokens[lo * 16: hi * 16], hash_value=hashes[lo:hi],
            prefix_keys=hashes[:lo],
            pool_transfers=[PoolTransfer(name=PoolName.SWA, host_indices=swa,
                                         keys=hashes[hi - WINDOW: hi],
                                         hit_policy=PoolHitPolicy.TRAILING_PAGES),
                            PoolTransfer(name=PoolName.MAMBA, host_indices=slot,
                                         keys=hashes[hi - 1: hi],
                                         hit_policy=PoolHitPolicy.TRAILING_PAGES)])
        a._page_backup(op)
        assert op.completed_tokens == 6 * 16
    assert a.storage_backend.counters["set_v2_stored"] == 2 * (WINDOW + 1)

    # Instance B: the whole prompt hits at 12 pages (node 2's end) ...
    pb = make_group(swa=True, mamba=True, pages=pages + 8)
    b = controller(backends(cfg()), pb["group"])
    register(b.storage_backend, pb)
    op = prefetch_op("r1", tokens, window_transfers(pb))
    hit_hashes, hit_tokens = b._storage_hit_query(op)
    assert hit_tokens == pages * 16 and hit_hashes == hashes
    op.hash_value, op.host_indices = hit_hashes, alloc_pages(pb["kv"], pages)
    b._page_transfer(op)
    assert page_bytes(pb["kv"], op.host_indices) == page_bytes(pa["kv"], kv)
    swa_t, mamba_t = op.pool_transfers
    assert swa_t.keys == hashes[pages - WINDOW:] and mamba_t.keys == hashes[-1:]
    assert page_bytes(pb["swa"], swa_t.host_indices) == swa_src[12]
    assert slot_bytes(pb["mamba"], mamba_t.host_indices) == mamba_src[12]
    assert extra_hits(b, op) == {"swa": WINDOW, "mamba": 1}

    # ... a prompt sharing 9 pages hits only node 1 (6 pages): no window ends at 7, 8, 9.
    other = tokens[: 9 * 16] + [t + 1 for t in tokens[9 * 16:]]
    op = prefetch_op("r2", other, window_transfers(pb))
    hit_hashes, hit_tokens = b._storage_hit_query(op)
    assert hit_tokens == 6 * 16 and hit_hashes == hashes[:6]
    op.hash_value, op.host_indices = hit_hashes, alloc_pages(pb["kv"], 6)
    b._page_transfer(op)
    swa_t, mamba_t = op.pool_transfers
    assert swa_t.keys == hashes[6 - WINDOW: 6] and mamba_t.keys == hashes[5:6]
    assert page_bytes(pb["swa"], swa_t.host_indices) == swa_src[6]
    assert slot_bytes(pb["mamba"], mamba_t.host_indices) == mamba_src[6]
    assert extra_hits(b, op) == {"swa": WINDOW, "mamba": 1}
