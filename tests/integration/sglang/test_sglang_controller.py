"""SGLang's own storage I/O code driving the backend: HiCacheController's backup
(_page_backup), storage hit query (_storage_hit_query) and prefetch transfer
(_page_transfer) with the zero-copy page functions SGLang selects for "interface_v1": 1,
on page hashes SGLang computes from token ids, in batches of STORAGE_BATCH_SIZE pages.

The controller is built without its GPU streams, device pool and process groups (it
cannot start on a CPU-only machine: see test_cpu_limits.py); only the attributes these
methods read are set, so the calls into the backend are exactly SGLang's.

Both SGLang generations, told apart by what they have: 0.5.23 hashes pages with
utils.get_storage_hash_str and reports prefetch progress as _page_transfer's page count plus
one PrefetchAck per batch on prefetch_sync_queue; 0.5.17 hashes with the get_hash_str that
attach_storage_backend stores on the controller and reports progress through
PrefetchOperation.increment (completed_tokens; mark_terminate on a short batch).
"""
from __future__ import annotations

import random
from queue import Queue

import pytest

from sglang.srt.managers import cache_controller
from sglang.srt.managers.cache_controller import (HiCacheController, PrefetchOperation,
                                                  StorageOperation)
from sglang.srt.mem_cache.hicache_storage import STORAGE_BATCH_SIZE
try:
    from sglang.srt.mem_cache.utils import get_storage_hash_str
except ImportError:  # SGLang 0.5.17: the same page hash chain under its older name
    from sglang.srt.mem_cache.utils import get_hash_str as get_storage_hash_str
from sglang_pools import alloc_pages, fill_pages, make_config, make_pool, page_bytes


def controller(backend, pool) -> HiCacheController:
    c = HiCacheController.__new__(HiCacheController)
    c.page_size = pool.page_size
    c.storage_backend = backend
    c.mem_pool_host = c.storage_host_pool = pool
    c.page_get_func = c._page_get_zero_copy  # what attach_storage_backend picks for
    c.page_set_func = c._page_set_zero_copy  # a dynamic backend with interface_v1
    c.prefetch_sync_queue = Queue()
    c.has_draft = False  # as __init__ sets it (no speculative-decoding draft pool)
    c.get_hash_str = get_storage_hash_str  # what 0.5.17's attach_storage_backend sets
    return c


PREFETCH_ACKS = hasattr(cache_controller, "PrefetchAck")  # 0.5.23; 0.5.17 has none


def transfer(c: HiCacheController, op: PrefetchOperation) -> int:
    """SGLang's prefetch transfer of op; the pages it reports done, checked the way this
    SGLang reports them: 0.5.23 returns the page count and acks each storage batch with the
    running total; 0.5.17 returns nothing and counts completed_tokens, terminating the
    operation at the first short batch."""
    done = c._page_transfer(op)
    if PREFETCH_ACKS:
        acks = [c.prefetch_sync_queue.get_nowait() for _ in range(c.prefetch_sync_queue.qsize())]
        batches = -(-len(op.hash_value) // STORAGE_BATCH_SIZE)
        assert len(acks) == batches  # one ack per batch, even after a failed one
        assert acks[-1].completed_tokens == done * c.page_size
        return done
    assert done is None and c.prefetch_sync_queue.empty()
    assert op.completed_tokens % c.page_size == 0
    pages = op.completed_tokens // c.page_size
    assert op.is_terminated() == (pages < len(op.hash_value))
    return pages


@pytest.mark.parametrize("kind", ["mha", "mla"])
def test_sglang_backup_then_prefetch(daemon, backends, salt, kind):
    pages = STORAGE_BATCH_SIZE * 2 + 17  # three storage batches
    rng = random.Random(kind)
    tokens = [rng.randrange(32000) for _ in range(pages * 16)]
    mla = kind == "mla"
    cfg = lambda: make_config({"salt": salt}, mla=mla, endpoint=daemon.endpoint)  # noqa: E731

    # Instance A backs a request's pages up, as SGLang's backup thread does.
    pool_a = make_pool(kind, "page_first", pages=pages)
    a = controller(backends(cfg(), pool_a), pool_a)
    hashes = get_storage_hash_str(tokens, None, page_size=pool_a.page_size)
    assert len(hashes) == pages
    src = alloc_pages(pool_a, pages)
    fill_pages(pool_a, src, 123)
    backup = StorageOperation(src, tokens, hash_value=hashes, prefix_keys=[])
    a._page_backup(backup)
    assert backup.completed_tokens == len(tokens)

    # Instance B (another process would do the same) queries and prefetches them.
    pool_b = make_pool(kind, "page_first", pages=pages + 8)
    b = controller(backends(cfg(), pool_b), pool_b)
    op = PrefetchOperation("req-1", tokens, None, prefix_keys=[])
    hit_hashes, hit_tokens = b._storage_hit_query(op)
    assert hit_tokens == len(tokens) and hit_hashes == hashes
    op.hash_value = hit_hashes
    alloc_pages(pool_b, 8)
    op.host_indices = alloc_pages(pool_b, pages)
    assert transfer(b, op) == pages  # (three storage batches)
    assert page_bytes(pool_b, op.host_indices) == page_bytes(pool_a, src)

    # A request sharing only a prefix hits only that prefix.
    shared = 150
    other = tokens[: shared * 16] + [t + 1 for t in tokens[shared * 16:]]
    hit_hashes, hit_tokens = b._storage_hit_query(PrefetchOperation("req-2", other, None))
    assert hit_tokens == shared * 16 and hit_hashes == hashes[:shared]


def test_sglang_paths_with_the_daemon_gone(daemon_factory, backends):
    """SGLang's backup, hit query and prefetch transfer degrade to "nothing" (never an
    exception, never None) once kvstratad is killed."""
    d = daemon_factory()
    pool = make_pool("mha", "page_first", pages=40)
    c = controller(backends(make_config({"timeout_s": 1.0}, endpoint=d.endpoint), pool), pool)
    tokens = list(range(16 * 16))
    hashes = get_storage_hash_str(tokens, None, page_size=pool.page_size)
    src = alloc_pages(pool, 16)
    fill_pages(pool, src, 5)
    c._page_backup(StorageOperation(src, tokens, hash_value=hashes, prefix_keys=[]))
    assert c._storage_hit_query(PrefetchOperation("r", tokens, None))[1] == len(tokens)

    d.kill()
    assert c._storage_hit_query(PrefetchOperation("r", tokens, None)) == ([], 0)
    op = PrefetchOperation("r", tokens, None, prefix_keys=[])
    op.hash_value, op.host_indices = hashes, alloc_pages(pool, 16)
    assert transfer(c, op) == 0
    backup = StorageOperation(src, tokens, hash_value=hashes, prefix_keys=[])
    c._page_backup(backup)
    assert backup.completed_tokens == 0
