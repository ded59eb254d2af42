"""Every class of bad input raises a clear TypeError/ValueError before any byte moves, and
leaves the backend (and the pages already stored) intact."""
from __future__ import annotations

import pytest
import torch

import kvstrata_sglang
from sglang.srt.mem_cache.storage import StorageBackendFactory
from sglang_pools import alloc_pages, fill_pages, keys_for, make_config, make_pool, page_bytes


@pytest.fixture
def stored(daemon, backends, salt):
    """A backend on a page_first MHA pool with 4 pages stored; (backend, pool, keys, idx)."""
    pool = make_pool("mha", "page_first", pages=16)
    b = backends(make_config({"salt": salt}, endpoint=daemon.endpoint), pool)
    idx = alloc_pages(pool, 4)
    fill_pages(pool, idx, 70)
    keys = keys_for("bad-input", 4)
    assert b.batch_set_v1(keys, idx) == [True] * 4
    return b, pool, keys, idx


@pytest.mark.parametrize("extra,message", [
    ({"sallt": "x"}, "unknown key"),
    ({"salt": 7}, "'salt' must be a string"),
    ({"salt": "s" * 257}, "longer than 256"),
    ({"endpoint": ""}, "'endpoint' must not be empty"),
    ({"timeout_s": 0}, "'timeout_s' = 0 is outside"),
    ({"timeout_s": "fast"}, "'timeout_s' must be a number"),
    ({"timeout_s": float("nan")}, "outside"),
    ({"retry_interval_s": -1}, "outside"),
    ({"heartbeat_timeout_ms": 1.5}, "'heartbeat_timeout_ms' must be an integer"),
    ({"model": ""}, "'model' must not be empty"),
    ({"token_file": "/nonexistent/token"}, "cannot read token_file"),
    ({"fast_lookup": 1}, "'fast_lookup' must be true or false"),
    ({"copy_threads": 0}, "'copy_threads' must be an integer"),
    ({"copy_threads": 2.0}, "'copy_threads' must be an integer"),
])
def test_bad_options(daemon, extra, message):
    with pytest.raises(ValueError, match=message):
        kvstrata_sglang.KVStrataStorage(make_config(extra, endpoint=daemon.endpoint), {})


def test_bad_config_object():
    with pytest.raises(TypeError, match="HiCacheStorageConfig"):
        kvstrata_sglang.KVStrataStorage({"extra_config": {}}, {})


def test_unsupported_pools(daemon, backends):
    b = backends(make_config(endpoint=daemon.endpoint))
    pool = make_pool("mha", "page_first")
    pool.layout = "page_head"  # a layout the namespace cannot record
    with pytest.raises(ValueError, match="layout 'page_head' is not supported"):
        b.register_mem_pool_host(pool)
    with pytest.raises(ValueError, match="is not an MHA host pool|says MLA"):
        backends(make_config(mla=True, endpoint=daemon.endpoint)).register_mem_pool_host(
            make_pool("mha", "page_first"))
    no_name = backends(make_config(model=None, endpoint=daemon.endpoint))
    with pytest.raises(ValueError, match="no model name"):
        no_name.register_mem_pool_host(make_pool("mha", "page_first"))
    with pytest.raises(RuntimeError, match="register_mem_pool_host"):
        b.batch_exists(keys_for("x", 1))


def test_bad_keys(stored):
    b, pool, keys, idx = stored
    ps = pool.page_size
    for bad, err in [("abc", TypeError), (b"abc", TypeError), ([b"raw"], TypeError),
                     ([None], TypeError), ([""], ValueError), ([1], TypeError)]:
        with pytest.raises(err):
            b.batch_exists(bad)
        with pytest.raises(err):
            b.batch_set_v1(bad, idx[:ps])
        with pytest.raises(err):
            b.batch_get_v1(bad, idx[:ps])


def test_bad_host_indices(stored):
    b, pool, keys, idx = stored
    ps, size = pool.page_size, pool.size
    aligned = torch.arange(ps, dtype=torch.int64)
    cases = [
        (list(range(ps)), TypeError, "torch.Tensor"),
        (aligned.float(), ValueError, "integer tensor"),
        (aligned.view(1, ps), ValueError, "1-D"),
        (aligned[:-1], ValueError, f"need {ps} host indices"),
        (torch.cat([aligned, aligned]), ValueError, f"need {ps} host indices"),
        (aligned + 1, ValueError, "not the start of a page"),
        (aligned + size, ValueError, "not the start of a page"),
        (aligned - ps, ValueError, "not the start of a page"),
        (aligned.flip(0), ValueError, "consecutive"),
    ]
    expected = page_bytes(pool, idx)
    for indices, err, message in cases:
        for call in (b.batch_set_v1, b.batch_get_v1):
            with pytest.raises(err, match=message):
                call(keys[:1], indices)
    # Nothing moved: the stored pages and the pool are as they were.
    assert page_bytes(pool, idx) == expected
    dst = alloc_pages(pool, 4)
    assert b.batch_get_v1(keys, dst) == [True] * 4
    assert page_bytes(pool, dst) == expected


def test_bad_legacy_pages(stored):
    b, pool, keys, idx = stored
    page = pool.get_dummy_flat_data_page()
    for bad, err, message in [
        (page[:-1], ValueError, "bytes; pages of this pool have"),
        (torch.cat([page, page]), ValueError, "bytes; pages of this pool have"),
        (page.numpy(), TypeError, "torch.Tensor") if page.dtype != torch.bfloat16 else
        (bytearray(page.numel() * 2), TypeError, "torch.Tensor"),
        (torch.zeros(2, page.numel(), dtype=page.dtype)[:, 0], ValueError,
         "bytes; pages|contiguous"),
    ]:
        with pytest.raises(err, match=message):
            b.set(keys_for("legacy-bad", 1)[0], bad)
        with pytest.raises(err, match=message):
            b.get(keys[0], bad)
    with pytest.raises(ValueError, match="needs the page tensor"):
        b.set(keys[0])
    with pytest.raises(ValueError, match="2 keys but 1 values"):
        b.batch_set(keys[:2], [page])
    with pytest.raises(ValueError, match="2 keys but 1 target"):
        b.batch_get(keys[:2], [page])
    assert b.batch_exists(keys_for("legacy-bad", 1)) == 0


def test_created_through_sglangs_dynamic_factory(daemon, salt):
    """The path SGLang takes: StorageBackendFactory.create_backend("dynamic", ...)."""
    cfg = make_config({"salt": salt}, endpoint=daemon.endpoint)
    pool = make_pool("mha", "page_first")
    b = StorageBackendFactory.create_backend("dynamic", cfg, pool)
    try:
        assert isinstance(b, kvstrata_sglang.KVStrataStorage)
        b.register_mem_pool_host(pool)
        idx = alloc_pages(pool, 2)
        fill_pages(pool, idx, 80)
        keys = keys_for("factory", 2)
        assert b.batch_set_v1(keys, idx) == [True, True]
        assert b.batch_exists(keys) == 2
    finally:
        b.close()
    bad = make_config({"salt": 1}, endpoint=daemon.endpoint)
    with pytest.raises(ValueError, match="'salt' must be a string"):
        StorageBackendFactory.create_backend("dynamic", bad, pool)


@pytest.mark.parametrize("fields,writer", [
    ({"is_storage_writer": True, "is_mla_model": True, "tp_rank": 3}, True),   # 0.5.23
    ({"is_storage_writer": False, "is_mla_model": False, "tp_rank": 0}, False),
    ({"is_mla_model": False, "tp_rank": 3}, True),   # 0.5.17: no is_storage_writer
    ({"is_mla_model": True, "tp_rank": 0}, True),
    ({"is_mla_model": True, "tp_rank": 1}, False),
])
def test_storage_writer_with_and_without_the_config_property(fields, writer):
    """SGLang 0.5.17's HiCacheStorageConfig has no is_storage_writer: its rule applies."""
    from types import SimpleNamespace

    from kvstrata_sglang.storage import storage_writer
    assert storage_writer(SimpleNamespace(**fields)) is writer
