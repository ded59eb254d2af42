"""SGLang's v2 storage interface for hybrid models, on SGLang's real host pools (a
HostPoolGroup of the KV pool with a sliding-window KV pool and a MambaPoolHost) and a real
kvstratad: every extra pool byte-exact in its own namespace, hits counted by SGLang's hit
policies (SWA: the window's pages; Mamba: the last page's state), the MLA writer rule,
the daemon absent."""
from __future__ import annotations

from typing import Iterator

import pytest
import torch
from kvs_testing import Daemon, run_daemon, short_tmpdir

import sglang_pools as sp
from sglang.srt.mem_cache.hicache_storage import PoolName
from sglang_hybrid_pools import fill_slots, make_group, register, slot_bytes, transfer
from sglang_pools import alloc_pages, fill_pages, keys_for, make_config, page_bytes

LAYOUTS = [("mha", l) for l in sp.LAYOUTS] + [("mla", "page_first")]


@pytest.fixture(scope="module")
def daemon() -> Iterator[Daemon]:
    """This module's kvstratad: 64 MiB of L1 in 4 MiB slabs. A slab holds blocks of one
    size only, and the KV, SWA and Mamba pools have three block sizes: in the run's shared
    daemon (one 64 MiB slab) each pool's stores would evict the others' blocks."""
    yield from run_daemon(Daemon(short_tmpdir(), {"l1.slab_size": "4MiB"}))


def hybrid(backends, daemon, salt, kind="mha", layout="page_first", mamba=True, **cfg):
    pools = make_group(kind, layout, swa=True, mamba=mamba)
    b = backends(make_config({"salt": salt}, mla=kind == "mla", endpoint=daemon.endpoint,
                             **cfg))
    register(b, pools)
    return b, pools


@pytest.mark.parametrize("kind,layout", LAYOUTS)
def test_swa_and_mamba_round_trip_byte_exact(daemon, backends, salt, kind, layout):
    w, wp = hybrid(backends, daemon, salt, kind, layout)
    r, rp = hybrid(backends, daemon, salt, kind, layout)
    fps = {w.namespace.fingerprint, w.extra_namespace("swa").fingerprint,
           w.extra_namespace("mamba").fingerprint}
    assert len(fps) == 3, "each pool has its own namespace"
    assert r.extra_namespace("swa").fingerprint == w.extra_namespace("swa").fingerprint
    assert w.extra_namespace("mamba").bytes_per_block == wp["mamba"].size_per_token

    n, keys = 4, keys_for(f"hybrid/{kind}/{layout}", 4)
    kv, swa = alloc_pages(wp["kv"], n), alloc_pages(wp["swa"], n)
    mamba = wp["mamba"].alloc(1)
    fill_pages(wp["kv"], kv, 1)
    fill_pages(wp["swa"], swa, 2)
    fill_slots(wp["mamba"], mamba, 3)
    assert w.batch_set_v1(keys, kv) == [True] * n
    got = w.batch_set_v2([transfer(PoolName.SWA, keys, swa),
                          transfer(PoolName.MAMBA, keys[-1:], mamba)])
    assert got == {PoolName.SWA: [True] * n, PoolName.MAMBA: [True]}

    alloc_pages(rp["swa"], 3)  # other host indices on the reading side
    rkv, rswa = alloc_pages(rp["kv"], n), alloc_pages(rp["swa"], n)
    rp["mamba"].alloc(2)
    rmamba = rp["mamba"].alloc(1)
    assert r.batch_get_v1(keys, rkv) == [True] * n
    got = r.batch_get_v2([transfer(PoolName.SWA, keys, rswa),
                          transfer(PoolName.MAMBA, keys[-1:], rmamba)])
    assert got == {PoolName.SWA: [True] * n, PoolName.MAMBA: [True]}
    assert page_bytes(rp["kv"], rkv) == page_bytes(wp["kv"], kv)
    assert page_bytes(rp["swa"], rswa) == page_bytes(wp["swa"], swa)
    assert slot_bytes(rp["mamba"], rmamba) == slot_bytes(wp["mamba"], mamba)
    assert r.counters["get_v2_hits"] == n + 1 and w.counters["set_v2_stored"] == n + 1


def test_pools_never_share_blocks(daemon, backends, salt):
    """A page stored in the KV pool is not found in the SWA or Mamba pool, and back."""
    b, p = hybrid(backends, daemon, salt)
    keys = keys_for("apart", 2)
    kv = alloc_pages(p["kv"], 2)
    fill_pages(p["kv"], kv, 4)
    assert b.batch_set_v1(keys, kv) == [True, True]
    swa, slot = alloc_pages(p["swa"], 2), p["mamba"].alloc(1)
    assert b.batch_get_v2([transfer(PoolName.SWA, keys, swa),
                           transfer(PoolName.MAMBA, keys[:1], slot)]) == \
        {PoolName.SWA: [False, False], PoolName.MAMBA: [False]}
    other = keys_for("apart-2", 1)
    fill_slots(p["mamba"], slot, 5)
    assert b.batch_set_v2([transfer(PoolName.MAMBA, other, slot)]) == {PoolName.MAMBA: [True]}
    assert b.batch_exists(other) == 0
    assert b.batch_get_v1(other, alloc_pages(p["kv"], 1)) == [False]


def _store_windows(b, p, keys, swa_pages, mamba_pages):
    """KV for every key, SWA for the pages in swa_pages, Mamba state after mamba_pages."""
    kv = alloc_pages(p["kv"], len(keys))
    fill_pages(p["kv"], kv, 6)
    assert b.batch_set_v1(keys, kv) == [True] * len(keys)
    ks = [keys[i] for i in swa_pages]
    swa = alloc_pages(p["swa"], len(ks))
    fill_pages(p["swa"], swa, 7)
    slots = p["mamba"].alloc(len(mamba_pages))
    fill_slots(p["mamba"], slots, 8)
    got = b.batch_set_v2([transfer(PoolName.SWA, ks, swa),
                          transfer(PoolName.MAMBA, [keys[i] for i in mamba_pages], slots)])
    assert all(all(v) for v in got.values())


def _exists(b, keys, swa_window=2, mamba=True, policy="trailing_pages"):
    ts = [transfer(PoolName.SWA, ["__placeholder__"] * swa_window, policy=policy)]
    if mamba:
        ts.append(transfer(PoolName.MAMBA, ["__placeholder__"]))
    return b.batch_exists_v2(keys, ts)


def test_hits_follow_sglang_hit_policies(daemon, backends, salt):
    """8 pages; SWA (window 2 pages) stored for pages 2,3 and 6,7, Mamba state after
    pages 3 and 7 (as SGLang backs up two nodes of 4 pages): restorable at 4 and 8."""
    b, p = hybrid(backends, daemon, salt)
    keys = keys_for("hits", 8)
    _store_windows(b, p, keys, swa_pages=[2, 3, 6, 7], mamba_pages=[3, 7])
    r = _exists(b, keys)
    assert r.kv_hit_pages == 8
    assert r.extra_pool_hit_pages == {PoolName.KV: 8, PoolName.SWA: 8, PoolName.MAMBA: 8}
    if hasattr(r, "restorable_prefix_pages"):  # SGLang 0.5.23
        assert r.restorable_prefix_pages == [4, 8]
    # 7 pages: the window [5, 7) lacks page 5 and no state follows page 6: back to 4.
    r = _exists(b, keys[:7])
    assert r.kv_hit_pages == 4 and r.extra_pool_hit_pages[PoolName.KV] == 7
    # SWA alone, a window of 3 pages: [1, 4) and [5, 8) lack pages 1 and 5: nothing.
    assert _exists(b, keys, swa_window=3, mamba=False).kv_hit_pages == 0
    # A window of 1 page: every page stored in SWA ends a restorable prefix.
    r = _exists(b, keys, swa_window=1, mamba=False)
    assert r.kv_hit_pages == 8 and r.extra_pool_hit_pages[PoolName.SWA] == 8
    if hasattr(r, "restorable_prefix_pages"):
        assert r.restorable_prefix_pages == [3, 4, 7, 8]
    # ALL_PAGES needs every page: SWA lacks page 0.
    assert _exists(b, keys, mamba=False, policy="all_pages").kv_hit_pages == 0
    # Misses: unknown keys, no KV prefix.
    r = _exists(b, keys_for("hits-none", 4))
    assert r.kv_hit_pages == 0 and r.extra_pool_hit_pages == {}
    assert _exists(b, []).kv_hit_pages == 0
    # No extra pools asked: the KV prefix, as batch_exists.
    assert b.batch_exists_v2(keys[:5], []).kv_hit_pages == 5


def test_mamba_state_missing_cuts_the_hit(daemon, backends, salt):
    b, p = hybrid(backends, daemon, salt)
    keys = keys_for("mamba-cut", 8)
    _store_windows(b, p, keys, swa_pages=[2, 3, 6, 7], mamba_pages=[3])
    r = _exists(b, keys)
    assert r.kv_hit_pages == 4
    assert r.extra_pool_hit_pages == {PoolName.KV: 8, PoolName.SWA: 8, PoolName.MAMBA: 4}


def test_mla_rank_writes_only_its_mamba_state(daemon, backends, salt):
    """MLA at TP 2: KV and SWA latents are written by rank 0 only (rank 1 answers True
    without writing, as SGLang's own MLA backends); the Mamba state is split over ranks,
    so every rank stores its own, in its own namespace."""
    ranks = [hybrid(backends, daemon, salt, "mla", tp_rank=i, tp_size=2) for i in (0, 1)]
    (b0, p0), (b1, p1) = ranks
    assert b0.namespace.fingerprint == b1.namespace.fingerprint
    assert b0.extra_namespace("swa").fingerprint == b1.extra_namespace("swa").fingerprint
    assert b0.extra_namespace("mamba").fingerprint != b1.extra_namespace("mamba").fingerprint
    keys = keys_for("mla-tp", 2)
    swa1, slot1 = alloc_pages(p1["swa"], 2), p1["mamba"].alloc(1)
    fill_pages(p1["swa"], swa1, 9)
    fill_slots(p1["mamba"], slot1, 10)
    got = b1.batch_set_v2([transfer(PoolName.SWA, keys, swa1),
                           transfer(PoolName.MAMBA, keys[1:], slot1)])
    assert got == {PoolName.SWA: [True, True], PoolName.MAMBA: [True]}
    assert b1.counters["set_skipped_not_writer"] == 2 and b1.counters["set_v2_stored"] == 1
    dst = p1["mamba"].alloc(1)
    assert b1.batch_get_v2([transfer(PoolName.MAMBA, keys[1:], dst)]) == \
        {PoolName.MAMBA: [True]}
    assert slot_bytes(p1["mamba"], dst) == slot_bytes(p1["mamba"], slot1)
    assert b0.batch_get_v2([transfer(PoolName.MAMBA, keys[1:], p0["mamba"].alloc(1))]) == \
        {PoolName.MAMBA: [False]}, "rank 0 never sees rank 1's shard"
    assert b0.batch_get_v2([transfer(PoolName.SWA, keys, alloc_pages(p0["swa"], 2))]) == \
        {PoolName.SWA: [False, False]}, "rank 1 did not write the replicated SWA latent"


def test_daemon_absent_answers_not_found(backends, salt, tmp_path):
    pools = make_group(mamba=True)
    b = backends(make_config({"salt": salt, "retry_interval_s": 60},
                             endpoint=str(tmp_path / "absent.sock")))
    register(b, pools)
    keys = keys_for("absent", 2)
    assert _exists(b, keys).kv_hit_pages == 0
    swa, slot = alloc_pages(pools["swa"], 2), pools["mamba"].alloc(1)
    ts = [transfer(PoolName.SWA, keys, swa), transfer(PoolName.MAMBA, keys[1:], slot)]
    assert b.batch_set_v2(ts) == {PoolName.SWA: [False, False], PoolName.MAMBA: [False]}
    assert b.batch_get_v2(ts) == {PoolName.SWA: [False, False], PoolName.MAMBA: [False]}


def test_clear_drops_every_pool(daemon, backends, salt):
    b, p = hybrid(backends, daemon, salt)
    keys = keys_for("clear-v2", 4)
    _store_windows(b, p, keys, swa_pages=[2, 3], mamba_pages=[3])
    assert _exists(b, keys).kv_hit_pages == 4
    b.clear()
    slot = p["mamba"].alloc(1)
    assert b.batch_get_v2([transfer(PoolName.MAMBA, keys[3:], slot)]) == \
        {PoolName.MAMBA: [False]}
    assert _exists(b, keys).kv_hit_pages == 0


def test_legacy_kv_calls_on_a_group(daemon, backends, salt):
    """The group's anchor is the KV pool: the v1 and legacy calls see its pages."""
    b, p = hybrid(backends, daemon, salt, mamba=False)
    idx = alloc_pages(p["kv"], 2)
    fill_pages(p["kv"], idx, 11)
    keys = keys_for("group-legacy", 2)
    assert b.batch_set_v1(keys, idx) == [True, True]
    pages = b.batch_get(keys)
    assert [t.view(torch.uint8).numpy().tobytes() for t in pages] == page_bytes(p["kv"], idx)
