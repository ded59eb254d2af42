"""batch_set_v1 / batch_get_v1 / batch_exists through a real kvstratad with SGLang's real
host KV pools: byte-exact pages for every layout, MHA and MLA, leading-hit counts, legacy
calls storing the same blocks, stats."""
from __future__ import annotations

import pytest
import torch

import sglang_pools as sp
from sglang_pools import alloc_pages, fill_pages, keys_for, make_config, make_pool, page_bytes

KINDS = [("mha", l) for l in sp.LAYOUTS] + [("mla", l) for l in sp.LAYOUTS]


@pytest.mark.parametrize("kind,layout", KINDS)
def test_set_then_get_is_byte_exact(daemon, backends, salt, kind, layout):
    mla = kind == "mla"
    cfg = lambda: make_config({"salt": salt}, mla=mla, endpoint=daemon.endpoint)  # noqa: E731
    src_pool, dst_pool = make_pool(kind, layout), make_pool(kind, layout)
    writer, reader = backends(cfg(), src_pool), backends(cfg(), dst_pool)
    assert writer.namespace.fingerprint == reader.namespace.fingerprint
    assert writer.namespace.bytes_per_block == writer.layout.bytes_per_page

    n = 8
    src = alloc_pages(src_pool, n)
    fill_pages(src_pool, src, seed=1)
    keys = keys_for(f"{kind}/{layout}", n)
    assert reader.batch_exists(keys) == 0
    assert writer.batch_set_v1(keys, src) == [True] * n
    assert reader.batch_exists(keys) == n

    alloc_pages(dst_pool, 3)  # different host indices on the reading side
    dst = alloc_pages(dst_pool, n)
    assert not torch.equal(src, dst)
    assert reader.batch_get_v1(keys, dst) == [True] * n
    assert page_bytes(dst_pool, dst) == page_bytes(src_pool, src)
    # Storing again: already present, still True, bytes unchanged.
    assert writer.batch_set_v1(keys, src) == [True] * n
    assert writer.counters["set_already_present"] == n


@pytest.mark.parametrize("kind", ["mha", "mla"])
def test_leading_hits_and_missing_pages(daemon, backends, salt, kind):
    pool = make_pool(kind, "page_first")
    b = backends(make_config({"salt": salt}, mla=kind == "mla", endpoint=daemon.endpoint), pool)
    idx = alloc_pages(pool, 6)
    fill_pages(pool, idx, seed=2)
    keys = keys_for("leading", 6)
    ps = pool.page_size
    # Store pages 0, 1, 2 and 4 (not 3, not 5).
    assert b.batch_set_v1(keys[:3], idx[: 3 * ps]) == [True] * 3
    assert b.batch_set_v1([keys[4]], idx[4 * ps: 5 * ps]) == [True]
    assert b.batch_exists(keys) == 3
    assert b.batch_exists(keys[4:]) == 1
    assert b.batch_exists(keys[3:]) == 0
    assert b.batch_exists([]) == 0
    assert b.exists(keys[0]) and not b.exists(keys[3])

    expected = page_bytes(pool, idx)
    dst = alloc_pages(pool, 6)
    got = b.batch_get_v1(keys, dst)
    assert got == [True, True, True, False, True, False]
    out = page_bytes(pool, dst)
    for i in (0, 1, 2, 4):
        assert out[i] == expected[i]
    assert b.batch_get_v1([], torch.empty(0, dtype=torch.int64)) == []


@pytest.mark.parametrize("kind,layout", KINDS)
def test_legacy_and_v1_store_the_same_blocks(daemon, backends, salt, kind, layout):
    pool = make_pool(kind, layout)
    b = backends(make_config({"salt": salt}, mla=kind == "mla", endpoint=daemon.endpoint), pool)
    idx = alloc_pages(pool, 4)
    fill_pages(pool, idx, seed=3)
    keys = keys_for("legacy", 4)
    ps = pool.page_size
    starts = idx[::ps].tolist()
    expected = page_bytes(pool, idx)
    # Legacy set (flat data pages, as SGLang's generic path passes them) ...
    assert b.batch_set(keys[:2], [pool.get_data_page(s, flat=True) for s in starts[:2]])
    assert b.set(keys[2], pool.get_data_page(starts[2], flat=True))
    # ... and v1 set for the last one.
    assert b.batch_set_v1(keys[3:], idx[3 * ps:]) == [True]
    # v1 get of legacy-stored pages, legacy get of v1-stored pages: same bytes.
    dst = alloc_pages(pool, 4)
    assert b.batch_get_v1(keys, dst) == [True] * 4
    assert page_bytes(pool, dst) == expected
    pages = b.batch_get(keys)
    assert all(p is not None for p in pages)
    assert [p.view(torch.uint8).numpy().tobytes() for p in pages] == expected
    target = pool.get_dummy_flat_data_page()
    assert b.get(keys[3], target) is target
    assert target.view(torch.uint8).numpy().tobytes() == expected[3]
    missing = keys_for("legacy-missing", 1)[0]
    assert b.get(missing) is None and b.batch_get([missing, keys[0]])[0] is None
    assert not b.exists(missing)


def test_non_hex_keys_and_stats(daemon, backends, salt):
    pool = make_pool("mha", "page_first")
    b = backends(make_config({"salt": salt}, endpoint=daemon.endpoint), pool)
    idx = alloc_pages(pool, 2)
    fill_pages(pool, idx, seed=4)
    keys = ["key-one", "a" * 200]  # not SGLang hashes: hashed to 32 bytes
    assert b.batch_set_v1(keys, idx) == [True, True]
    assert b.batch_exists(keys) == 2
    dst = alloc_pages(pool, 2)
    assert b.batch_get_v1(keys, dst) == [True, True]
    assert page_bytes(pool, dst) == page_bytes(pool, idx)
    stats = b.get_stats()
    assert stats.backup_pgs == [2] and stats.prefetch_pgs == [2]
    assert all(bw > 0 for bw in stats.backup_bandwidth + stats.prefetch_bandwidth)
    assert b.get_stats().backup_pgs == []  # handed out once
    no_metrics = backends(make_config({"salt": salt}, metrics=False, endpoint=daemon.endpoint),
                          pool)
    assert no_metrics.get_stats() is None


def test_clear_drops_only_this_namespace(daemon, backends, salt):
    pool = make_pool("mha", "page_first")
    a = backends(make_config({"salt": salt + "/a"}, endpoint=daemon.endpoint), pool)
    other = backends(make_config({"salt": salt + "/b"}, endpoint=daemon.endpoint), pool)
    idx = alloc_pages(pool, 3)
    fill_pages(pool, idx, seed=5)
    keys = keys_for("clear", 3)
    assert a.batch_set_v1(keys, idx) == [True] * 3
    assert other.batch_set_v1(keys, idx) == [True] * 3
    a.clear()
    assert a.batch_exists(keys) == 0
    assert other.batch_exists(keys) == 3


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float8_e4m3fn,
                                   torch.int8])
def test_other_dtypes_round_trip(daemon, backends, salt, dtype):
    pool = make_pool("mha", "page_first_direct", dtype=dtype)
    b = backends(make_config({"salt": salt}, endpoint=daemon.endpoint), pool)
    idx = alloc_pages(pool, 2)
    fill_pages(pool, idx, seed=6)
    keys = keys_for(str(dtype), 2)
    assert b.batch_set_v1(keys, idx) == [True, True]
    dst = alloc_pages(pool, 2)
    assert b.batch_get_v1(keys, dst) == [True, True]
    assert page_bytes(pool, dst) == page_bytes(pool, idx)


def test_concurrent_prefetch_and_backup_threads(daemon, backends, salt):
    """SGLang calls the backend from its prefetch and backup threads at once."""
    import threading

    pool = make_pool("mha", "layer_first", pages=64)
    b = backends(make_config({"salt": salt}, endpoint=daemon.endpoint), pool)
    errors, per_thread, rounds = [], 4, 5
    work = []
    for t in range(4):
        src, dst = alloc_pages(pool, per_thread), alloc_pages(pool, per_thread)
        fill_pages(pool, src, 90 + t)
        work.append((t, src, dst))

    def run(t, src, dst):
        try:
            for r in range(rounds):
                keys = keys_for(f"threads-{t}-{r}", per_thread)
                assert b.batch_set_v1(keys, src) == [True] * per_thread
                assert b.batch_exists(keys) == per_thread
                assert b.batch_get_v1(keys, dst) == [True] * per_thread
                assert page_bytes(pool, dst) == page_bytes(pool, src)
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=run, args=w) for w in work]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert not errors, errors
    assert b.counters["set_stored"] == 4 * per_thread * rounds


def test_batch_exists_fast_path_and_grpc_agree(daemon, backends, salt):
    pool = make_pool("mha", "page_first")
    fast = backends(make_config({"salt": salt}, endpoint=daemon.endpoint), pool)
    grpc_only = backends(make_config({"salt": salt, "fast_lookup": False},
                                     endpoint=daemon.endpoint), pool)
    assert fast.session.open_response.lookup_socket, "the daemon offers the fast path"
    idx = alloc_pages(pool, 5)
    fill_pages(pool, idx, 95)
    keys = keys_for("fast", 5)
    ps = pool.page_size
    assert fast.batch_set_v1(keys[:2] + keys[3:4], torch.cat([idx[:2 * ps],
                                                            idx[3 * ps:4 * ps]])) == [True] * 3
    for probe in (keys, keys[:2], keys[2:], keys[3:], keys[:1], ["not-a-hash"] + keys):
        assert fast.batch_exists(probe) == grpc_only.batch_exists(probe)
    assert fast.counters["exists_fast"] == fast.counters["exists_calls"] == 6
    assert grpc_only.counters["exists_fast"] == 0
    assert fast.batch_exists(keys) == 2


@pytest.mark.parametrize("layout", sp.LAYOUTS)
def test_parallel_copy_threads_byte_exact(daemon, backends, salt, layout):
    """copy_threads > 1 splits a batch of >= 8 MiB over threads; bytes stay exact."""
    pool = make_pool("mha", layout, pages=96, layers=8, heads=4, head_dim=128)
    b = backends(make_config({"salt": salt, "copy_threads": 3}, endpoint=daemon.endpoint), pool)
    assert b.layout.bytes_per_page * 40 >= 8 << 20  # large enough to go parallel
    src = alloc_pages(pool, 40)
    fill_pages(pool, src, 97)
    keys = keys_for(f"threads-{layout}", 40)
    assert b.batch_set_v1(keys, src) == [True] * 40
    dst = alloc_pages(pool, 40)
    assert b.batch_get_v1(keys, dst) == [True] * 40
    assert page_bytes(pool, dst) == page_bytes(pool, src)
