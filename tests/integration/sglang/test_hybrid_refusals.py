"""What the v2 interface refuses, with one clear line, on SGLang's real host pools: host
pools this backend cannot store (refused when SGLang registers them, so SGLang's attach
fails at start-up), pools whose pages do not match their geometry, pools of other
geometries never sharing blocks, and malformed v2 arguments."""
from __future__ import annotations

from typing import Iterator

import pytest
import torch
from kvs_testing import Daemon, run_daemon, short_tmpdir
from sglang.srt.mem_cache.hicache_storage import PoolName

import sglang_hybrid_pools as hp
from sglang_hybrid_pools import fill_slots, make_group, make_mamba_pool, register, transfer
from sglang_pools import alloc_pages, fill_pages, keys_for, make_config, make_pool


@pytest.fixture(scope="module")
def daemon() -> Iterator[Daemon]:
    """64 MiB of L1 in 4 MiB slabs: one slab per block size (KV, SWA, Mamba)."""
    yield from run_daemon(Daemon(short_tmpdir(), {"l1.slab_size": "4MiB"}))


def anchored(backends, daemon, salt, **cfg):
    """A backend with the KV pool of a hybrid group registered (no extra pool yet)."""
    pools = make_group(swa=False, mamba=False)
    b = backends(make_config({"salt": salt}, endpoint=daemon.endpoint, **cfg))
    b.register_mem_pool_host(pools["group"])
    return b, pools


@pytest.mark.parametrize("name", ["indexer", "deepseek_v4_c4", "draft"])
def test_unsupported_pools_refused(daemon, backends, salt, name):
    b, _ = anchored(backends, daemon, salt)
    with pytest.raises(ValueError, match=rf"SGLang's '{name}' host pool \(MHATokenToKVPoolHost\) "
                                         r"is not supported by this backend") as err:
        b.register_mem_host_pool_v2(make_pool("mha", "page_first"), PoolName(name))
    assert "\n" not in str(err.value)
    assert name not in b.extra_pools


def test_pool_of_another_class_refused(daemon, backends, salt):
    """E.g. DeepSeek V4 registers a DeepSeekV4PagedHostPool as its 'swa' pool."""
    b, _ = anchored(backends, daemon, salt)
    with pytest.raises(ValueError, match="'swa' host pool is a MambaPoolHost, not a "
                                         "MHATokenToKVPoolHost / MLATokenToKVPoolHost"):
        b.register_mem_host_pool_v2(make_mamba_pool(), PoolName.SWA)
    with pytest.raises(ValueError, match="'mamba' host pool is a MHATokenToKVPoolHost"):
        b.register_mem_host_pool_v2(make_pool("mha", "page_first"), PoolName.MAMBA)


def test_v2_before_the_kv_pool_refused(daemon, backends, salt):
    b = backends(make_config({"salt": salt}, endpoint=daemon.endpoint))
    with pytest.raises(RuntimeError, match="register_mem_pool_host"):
        b.register_mem_host_pool_v2(make_mamba_pool(), PoolName.MAMBA)


def test_kv_entry_must_be_the_registered_pool(daemon, backends, salt):
    b, pools = anchored(backends, daemon, salt)
    b.register_mem_host_pool_v2(pools["kv"], PoolName.KV)  # the anchor: fine
    with pytest.raises(ValueError, match="'kv' host pool .* is not the registered KV pool"):
        b.register_mem_host_pool_v2(make_pool("mha", "page_first"), PoolName.KV)


def test_mamba_pool_not_matching_its_geometry_refused(daemon, backends, salt):
    b, _ = anchored(backends, daemon, salt)
    pool = make_mamba_pool()
    pool.temporal_state_shape = (4, 16, 4)  # the buffers still hold (4, 16, 8)
    with pytest.raises(ValueError, match=r"describes a state slot as pieces \[6144, 1440\], "
                                         r"but its shapes give \[3072, 1440\]"):
        b.register_mem_host_pool_v2(pool, PoolName.MAMBA)


def test_mamba_slot_side_states_refused(daemon, backends, salt):
    if not hp.MAMBA_TAKES_BUFFER_INFO:
        pytest.skip("SGLang 0.5.17 to 0.5.21: MambaPoolHost has no slot side states")
    b, _ = anchored(backends, daemon, salt)
    pool = make_mamba_pool()
    pool.slot_state_device_tensors = [torch.zeros(9, 4)]
    with pytest.raises(ValueError, match="slot side states"):
        b.register_mem_host_pool_v2(pool, PoolName.MAMBA)


def test_swa_pool_refusals(daemon, backends, salt):
    b, _ = anchored(backends, daemon, salt)
    with pytest.raises(ValueError, match="pages of 8 tokens, the KV pool of 16"):
        b.register_mem_host_pool_v2(make_pool("mha", "page_first", page=8), PoolName.SWA)
    with pytest.raises(ValueError, match="MLATokenToKVPoolHost is not an MHA host pool"):
        b.register_mem_host_pool_v2(make_pool("mla", "page_first", layers=2), PoolName.SWA)
    with pytest.raises(ValueError, match="layout 'page_head' is not supported"):
        odd = make_pool("mha", "page_first", layers=2)
        odd.layout = "page_head"
        b.register_mem_host_pool_v2(odd, PoolName.SWA)
    assert b.extra_pools == {}


def test_other_geometries_never_share(daemon, backends, salt):
    """Same model and salt, different SWA layers or Mamba state: other namespaces, so
    what one stored is a miss for the other (never a load of the wrong bytes)."""
    a = make_group(swa=True, mamba=True)
    ba = backends(make_config({"salt": salt}, endpoint=daemon.endpoint))
    register(ba, a)
    other = make_group(swa=False, mamba=False)
    other_swa = make_pool("mha", "page_first", layers=3)
    other_mamba = make_mamba_pool(heads=2)
    bb = backends(make_config({"salt": salt}, endpoint=daemon.endpoint))
    bb.register_mem_pool_host(other["group"])
    bb.register_mem_host_pool_v2(other_swa, PoolName.SWA)
    bb.register_mem_host_pool_v2(other_mamba, PoolName.MAMBA)
    assert ba.namespace.fingerprint == bb.namespace.fingerprint  # the same KV pool
    for name in ("swa", "mamba"):
        assert ba.extra_namespace(name).fingerprint != bb.extra_namespace(name).fingerprint
    keys = keys_for("geometry", 2)
    swa, slot = alloc_pages(a["swa"], 2), a["mamba"].alloc(1)
    fill_pages(a["swa"], swa, 1)
    fill_slots(a["mamba"], slot, 2)
    assert all(all(v) for v in ba.batch_set_v2([transfer(PoolName.SWA, keys, swa),
                                               transfer(PoolName.MAMBA, keys[1:], slot)]
                                              ).values())
    got = bb.batch_get_v2([transfer(PoolName.SWA, keys, alloc_pages(other_swa, 2)),
                           transfer(PoolName.MAMBA, keys[1:], other_mamba.alloc(1))])
    assert got == {PoolName.SWA: [False, False], PoolName.MAMBA: [False]}


def test_bad_v2_arguments(daemon, backends, salt):
    pools = make_group(swa=True, mamba=True)
    b = backends(make_config({"salt": salt}, endpoint=daemon.endpoint))
    register(b, pools)
    keys = keys_for("bad-v2", 2)
    swa = alloc_pages(pools["swa"], 2)
    # Fewer host indices than keys * page: SGLang's own backends answer all False.
    assert b.batch_get_v2([transfer(PoolName.SWA, keys, swa[:16])]) == \
        {PoolName.SWA: [False, False]}
    assert b.batch_set_v2([transfer(PoolName.SWA, keys, None)]) == \
        {PoolName.SWA: [False, False]}
    with pytest.raises(ValueError, match="consecutive"):
        b.batch_set_v2([transfer(PoolName.SWA, keys, swa.flip(0))])
    with pytest.raises(ValueError, match="not the start of a page inside the host pool"):
        b.batch_get_v2([transfer(PoolName.MAMBA, keys[:1], torch.tensor([10_000]))])
    with pytest.raises(TypeError, match="host_indices must be a torch.Tensor"):
        b.batch_get_v2([transfer(PoolName.MAMBA, keys[:1], [0])])
    with pytest.raises(TypeError, match="a page key must be a str"):
        b.batch_set_v2([transfer(PoolName.MAMBA, [7], pools["mamba"].alloc(1))])
    with pytest.raises(ValueError, match="'indexer' pool, which was never registered"):
        b.batch_get_v2([transfer(PoolName.INDEXER, keys, swa)])
    # A hit query naming a pool never registered restores nothing.
    kv = alloc_pages(pools["kv"], 2)
    fill_pages(pools["kv"], kv, 3)
    assert b.batch_set_v1(keys, kv) == [True, True]
    assert b.batch_exists_v2(keys, [transfer(PoolName.INDEXER, keys)]).kv_hit_pages == 0
    assert b.batch_exists_v2(keys, []).kv_hit_pages == 2
    assert b.batch_get_v2([]) == {} and b.batch_set_v2([]) == {}
    assert b.batch_get_v2([transfer(PoolName.SWA, [], swa[:0])]) == {PoolName.SWA: []}
