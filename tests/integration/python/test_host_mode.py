"""Host mode on a real kvstratad: store/load through the shared-memory region, leases and
eviction (crashed clients, bad input and the admin cache calls: test_host_mode_errors.py).

Two daemons per module: `host_daemon` (64 MiB L1, 4 MiB slabs) for most tests and
`small_daemon` (8 MiB L1, 1 MiB slabs) for eviction pressure (conftest.py). Every test
uses its own namespace (a unique salt), so tests never see each other's blocks. Second
client processes run host_child.py.
"""
from __future__ import annotations

import os
import threading
import time
from typing import Dict, List

import grpc
import numpy as np
import pytest

import kvstrata
from kvstrata import pb
from host_child import block_bytes, chain_keys, digest
from kvs_testing import Daemon, assert_code, wait_until
from host_helpers import (BLOCK, HOST_SETTINGS, MIB, SMALL_SETTINGS, blocks_for, child_json,
                         l1_tier, opaque_spec, run_child)


# ---------------------------------------------------------------------- session and region


def test_open_session_offers_the_region(hsession: kvstrata.Session) -> None:
    r = hsession.open_response
    assert r.shm_fd_socket and os.path.exists(r.shm_fd_socket)
    assert r.shm_region_bytes >= 64 * MIB
    region = hsession.shared_region()
    assert region.size == r.shm_region_bytes
    assert hsession.shared_region() is region, "mapped once per session"
    assert len(region.buffer) == region.size and not region.buffer.readonly


def test_region_closes_with_the_session(hclient: kvstrata.Client) -> None:
    s = kvstrata.Session(hclient, client_name="pytest-host")
    region = s.shared_region()
    s.close()
    assert region.closed
    with pytest.raises(kvstrata.SharedRegionError):
        s.shared_region()


def test_unknown_session_on_the_fd_socket(hsession: kvstrata.Session) -> None:
    with pytest.raises(kvstrata.KVStrataError) as exc:
        kvstrata.SharedRegion.open(hsession.open_response.shm_fd_socket, (1 << 62) + 99)
    assert isinstance(exc.value, kvstrata.SharedRegionError)
    assert exc.value.code == grpc.StatusCode.NOT_FOUND
    assert "unknown or ended session" in exc.value.message


def test_closed_session_gets_no_region(hclient: kvstrata.Client) -> None:
    s = kvstrata.Session(hclient, client_name="pytest-host")
    sid, path = s.session_id, s.open_response.shm_fd_socket
    s.close()
    with pytest.raises(kvstrata.SharedRegionError) as exc:
        kvstrata.SharedRegion.open(path, sid)
    assert exc.value.code == grpc.StatusCode.NOT_FOUND


# ---------------------------------------------------------------------- store and load


def test_store_then_load_byte_exact(hsession: kvstrata.Session, hclient) -> None:
    ns = hsession.register_namespace(**opaque_spec())
    assert ns.bytes_per_block == BLOCK
    keys = chain_keys("same-process", 8)
    data = blocks_for(1, 8)
    # Every kind of source: numpy (1-D, 2-D, strided), bytes, bytearray, memoryview.
    wide = np.zeros((256, 512), dtype=np.uint8)
    wide[:, ::2] = data[3].reshape(256, 256)
    sources = [data[0], data[1].reshape(512, 128), data[2].tobytes(), wide[:, ::2],
               bytearray(data[4].tobytes()), memoryview(data[5].tobytes()),
               data[6].view(np.float32), data[7]]
    assert hsession.store(ns, keys, sources) == kvstrata.StoreResult(stored=8)

    hit = hsession.lookup(ns, keys)
    assert hit.hit_blocks == 8 and hit.tiers == [pb.TIER_L1_DRAM] * 8 and hit.lease_id == 0

    out = [np.empty(BLOCK, np.uint8), bytearray(BLOCK), np.empty((64, 512), np.float16)] + \
          [np.empty(BLOCK, np.uint8) for _ in range(5)]
    got = hsession.load(ns, keys, out=out)
    assert got == [True] * 8 and got.blocks[1] is out[1]
    assert np.array_equal(out[0], data[0])
    assert bytes(out[1]) == data[1].tobytes()
    assert out[2].tobytes() == data[2].tobytes()
    for i in range(3, 8):
        assert np.array_equal(out[i], data[i]), f"block {i} differs"

    fresh = hsession.load(ns, keys)  # New numpy arrays.
    assert fresh == [True] * 8
    for i, b in enumerate(fresh.blocks):
        assert isinstance(b, np.ndarray) and b.dtype == np.uint8 and np.array_equal(b, data[i])


def test_store_and_load_across_two_processes(host_daemon: Daemon, hsession) -> None:
    spec = opaque_spec()
    stored = run_child("store", host_daemon, spec=spec, chain="two-proc", count=10, seed=42)
    assert stored.returncode == 0, stored.stderr
    result = child_json(stored)
    assert (result["stored"], result["already_present"], result["dropped"]) == (10, 0, 0)

    # A second process: looks up a longer chain, leases the leading hits, loads them.
    loaded = run_child("lookup-load", host_daemon, spec=spec, chain="two-proc", count=0,
                       lookup=16)
    assert loaded.returncode == 0, loaded.stderr
    got = child_json(loaded)
    assert got["hit_blocks"] == 10 and got["lease_id"] != 0
    assert got["tiers"] == [pb.TIER_L1_DRAM] * 10
    assert got["found"] == [True] * 10
    assert got["digests"] == [digest(b) for b in blocks_for(42, 10)]

    # And this process sees the same namespace (same spec -> same fingerprint and id).
    ns = hsession.register_namespace(**spec)
    assert (ns.namespace_id, ns.fingerprint) == (result["namespace_id"], result["fingerprint"])
    back = hsession.load(ns, chain_keys("two-proc", 10))
    assert all(np.array_equal(b, d) for b, d in zip(back.blocks, blocks_for(42, 10)))


def test_leading_hits_stop_at_a_gap(hsession: kvstrata.Session) -> None:
    ns = hsession.register_namespace(**opaque_spec())
    keys = chain_keys("gap", 10)
    data = blocks_for(7, 10)
    present = [i for i in range(10) if i != 4]
    assert hsession.store(ns, [keys[i] for i in present], [data[i] for i in present]).stored == 9
    hit = hsession.lookup(ns, keys)
    assert hit.hit_blocks == 4 and len(hit.tiers) == 4
    assert hsession.lookup(ns, keys[5:]).hit_blocks == 5
    assert hsession.lookup(ns, [keys[4]] + keys[:4]).hit_blocks == 0
    got = hsession.load(ns, keys)  # Load is per key: the gap is missing, the rest ready.
    assert got == [i != 4 for i in range(10)]
    assert got.leading_hits == 4 and got.blocks[4] is None
    assert all(np.array_equal(got.blocks[i], data[i]) for i in present)


def test_duplicate_store_is_already_present(hsession: kvstrata.Session, hclient) -> None:
    ns = hsession.register_namespace(**opaque_spec())
    keys = chain_keys("dup", 4)
    data = blocks_for(3, 4)
    assert hsession.store(ns, keys[:3], data[:3]) == kvstrata.StoreResult(stored=3)
    again = hsession.store(ns, keys, [np.zeros(BLOCK, np.uint8)] * 4)
    assert again == kvstrata.StoreResult(stored=1, already_present=3, dropped=0)
    # The first bytes win: already-present blocks were not overwritten.
    got = hsession.load(ns, keys)
    assert np.array_equal(got.blocks[0], data[0]) and not got.blocks[3].any()
    raw = hclient.reserve_store(session_id=hsession.session_id, namespace_id=ns.namespace_id,
                                keys=keys)
    assert [s.state for s in raw.slots] == [pb.SlotRef.STATE_ALREADY_PRESENT] * 4
    assert raw.reservation_id == 0
    # A key repeated inside one request is reserved once.
    k = chain_keys("dup-in-request", 1)[0]
    raw = hclient.reserve_store(session_id=hsession.session_id, namespace_id=ns.namespace_id,
                                keys=[k, k])
    assert [s.state for s in raw.slots] == [pb.SlotRef.STATE_RESERVED,
                                            pb.SlotRef.STATE_ALREADY_PRESENT]
    hclient.commit_store(session_id=hsession.session_id, reservation_id=raw.reservation_id,
                         abort=True)


def test_block_visible_only_after_commit(hsession: kvstrata.Session, hclient) -> None:
    ns = hsession.register_namespace(**opaque_spec())
    keys = chain_keys("visibility", 3)
    region = hsession.shared_region()
    r = hclient.reserve_store(session_id=hsession.session_id, namespace_id=ns.namespace_id,
                              keys=keys)
    assert r.reservation_id != 0
    assert [s.state for s in r.slots] == [pb.SlotRef.STATE_RESERVED] * 3
    assert all(s.length == BLOCK and s.offset + s.length <= region.size for s in r.slots)
    offsets = sorted(s.offset for s in r.slots)
    assert all(b - a >= BLOCK for a, b in zip(offsets, offsets[1:])), "slots overlap"
    for i, s in enumerate(r.slots):
        region.buffer[s.offset:s.offset + BLOCK] = bytes([i + 1]) * BLOCK
    assert hsession.lookup(ns, keys).hit_blocks == 0, "reserved but uncommitted"
    assert hsession.load(ns, keys) == [False] * 3
    # Commit only indices 0 and 2: 1 is released without becoming visible.
    c = hclient.commit_store(session_id=hsession.session_id, reservation_id=r.reservation_id,
                             written=[0, 2])
    assert c.committed_blocks == 2
    got = hsession.load(ns, keys)
    assert got == [True, False, True]
    assert bytes(got.blocks[2][:4]) == b"\x03" * 4


def test_abort_makes_nothing_visible(hsession: kvstrata.Session, hclient) -> None:
    ns = hsession.register_namespace(**opaque_spec())
    keys = chain_keys("abort", 4)
    used = l1_tier(hclient).used_bytes
    r = hclient.reserve_store(session_id=hsession.session_id, namespace_id=ns.namespace_id,
                              keys=keys)
    assert l1_tier(hclient).used_bytes == used + 4 * BLOCK, "open reservations hold slots"
    hclient.commit_store(session_id=hsession.session_id, reservation_id=r.reservation_id,
                         abort=True)
    assert hsession.lookup(ns, keys).hit_blocks == 0
    assert l1_tier(hclient).used_bytes == used


def test_store_failing_midway_aborts(hsession: kvstrata.Session, hclient, monkeypatch) -> None:
    import kvstrata.host as host_mod

    ns = hsession.register_namespace(**opaque_spec())
    keys = chain_keys("midway", 4)
    data = blocks_for(5, 4)
    used = l1_tier(hclient).used_bytes
    real = host_mod.RegionCopier.to_slot
    calls = []

    def flaky(self, src, offset, length):
        calls.append(offset)
        if len(calls) == 3:
            raise OSError("copy failed at block 2")
        real(self, src, offset, length)

    monkeypatch.setattr(host_mod.RegionCopier, "to_slot", flaky)
    with pytest.raises(OSError, match="block 2"):
        hsession.store(ns, keys, data)
    monkeypatch.undo()
    assert hsession.lookup(ns, keys).hit_blocks == 0, "an aborted store must stay invisible"
    assert l1_tier(hclient).used_bytes == used, "the aborted reservation leaked slots"
    assert hsession.store(ns, keys, data).stored == 4


# ---------------------------------------------------------------------- leases


def test_lease_is_consumed_by_load(hsession: kvstrata.Session, hclient) -> None:
    ns = hsession.register_namespace(**opaque_spec())
    keys = chain_keys("lease", 5)
    hsession.store(ns, keys, blocks_for(9, 5))
    hit = hsession.lookup(ns, keys + chain_keys("lease-miss", 2), lease=True, lease_ttl_ms=5000)
    assert hit.hit_blocks == 5 and hit.lease_id != 0 and hit.lease_expires_unix_ms > 0
    assert hsession.load(ns, keys, lease_id=hit.lease_id) == [True] * 5
    with pytest.raises(kvstrata.KVStrataError) as exc:
        hsession.load(ns, keys, lease_id=hit.lease_id)
    assert_code(exc, grpc.StatusCode.NOT_FOUND)
    with pytest.raises(kvstrata.KVStrataError) as exc:
        hsession.release_lease(hit.lease_id)
    assert_code(exc, grpc.StatusCode.NOT_FOUND)


def test_lease_ttl_is_clamped(hsession: kvstrata.Session) -> None:
    ns = hsession.register_namespace(**opaque_spec())
    keys = chain_keys("lease-clamp", 1)
    hsession.store(ns, keys, blocks_for(1, 1))
    now_ms = time.time() * 1000
    hit = hsession.lookup(ns, keys, lease=True, lease_ttl_ms=10**9)
    assert now_ms < hit.lease_expires_unix_ms <= now_ms + 60_000 + 5_000  # max_lease_ttl_ms
    hsession.release_lease(hit.lease_id)


def test_lookup_without_hits_takes_no_lease(hsession: kvstrata.Session) -> None:
    ns = hsession.register_namespace(**opaque_spec())
    hit = hsession.lookup(ns, chain_keys("nothing", 3), lease=True)
    assert (hit.hit_blocks, hit.lease_id, hit.tiers) == (0, 0, [])


def test_lease_expires(hsession: kvstrata.Session, hclient) -> None:
    ns = hsession.register_namespace(**opaque_spec())
    keys = chain_keys("lease-ttl", 2)
    hsession.store(ns, keys, blocks_for(2, 2))
    hit = hsession.lookup(ns, keys, lease=True, lease_ttl_ms=200)
    assert hit.lease_id != 0
    assert hclient.evict(fingerprint=ns.fingerprint, keys=keys).evicted_blocks == 0
    time.sleep(0.5)
    with pytest.raises(kvstrata.KVStrataError) as exc:
        hsession.load(ns, keys, lease_id=hit.lease_id)
    assert_code(exc, grpc.StatusCode.NOT_FOUND)
    assert wait_until(lambda: hclient.evict(fingerprint=ns.fingerprint,
                                            keys=keys).evicted_blocks == 2, 5.0), \
        "an expired lease must unpin its blocks"


def test_release_lease_and_unknown_lease(hsession: kvstrata.Session) -> None:
    ns = hsession.register_namespace(**opaque_spec())
    keys = chain_keys("release-lease", 2)
    hsession.store(ns, keys, blocks_for(2, 2))
    hit = hsession.lookup(ns, keys, lease=True)
    hsession.release_lease(hit.lease_id)
    with pytest.raises(kvstrata.KVStrataError) as exc:
        hsession.release_lease(hit.lease_id)
    assert_code(exc, grpc.StatusCode.NOT_FOUND)
    with pytest.raises(kvstrata.KVStrataError) as exc:
        hsession.load(ns, keys, lease_id=hit.lease_id)
    assert_code(exc, grpc.StatusCode.NOT_FOUND)


def test_lease_of_another_session(hsession: kvstrata.Session, hclient) -> None:
    ns = hsession.register_namespace(**opaque_spec())
    keys = chain_keys("lease-owner", 2)
    hsession.store(ns, keys, blocks_for(4, 2))
    hit = hsession.lookup(ns, keys, lease=True)
    with kvstrata.Session(hclient, client_name="other") as other:
        with pytest.raises(kvstrata.KVStrataError) as exc:
            other.release_lease(hit.lease_id)
        assert_code(exc, grpc.StatusCode.FAILED_PRECONDITION)
    assert hsession.load(ns, keys, lease_id=hit.lease_id) == [True, True]


def test_leased_block_survives_evict(hsession: kvstrata.Session, hclient) -> None:
    ns = hsession.register_namespace(**opaque_spec())
    keys = chain_keys("leased-evict", 2)
    hsession.store(ns, keys, blocks_for(6, 2))
    hit = hsession.lookup(ns, keys, lease=True)
    assert hclient.evict(fingerprint=ns.fingerprint, keys=keys).evicted_blocks == 0
    assert hsession.load(ns, keys, lease_id=hit.lease_id) == [True, True]
    assert hclient.evict(fingerprint=ns.fingerprint, keys=keys).evicted_blocks == 2


def test_load_of_missing_keys_pins_nothing(hsession: kvstrata.Session, hclient) -> None:
    ns = hsession.register_namespace(**opaque_spec())
    keys = chain_keys("all-missing", 3)
    r = hclient.acquire_load(session_id=hsession.session_id, namespace_id=ns.namespace_id,
                             keys=keys)
    assert r.load_id == 0 and [s.state for s in r.slots] == [pb.SlotRef.STATE_MISSING] * 3
    got = hsession.load(ns, keys)
    assert got == [False] * 3 and got.blocks == [None] * 3


def test_threads_share_one_session(hsession: kvstrata.Session) -> None:
    """Eight threads, pairs racing on the same chain: each key is stored exactly once.

    ALREADY_PRESENT also covers a key another writer has reserved but not yet committed,
    so a thread may not see its twin's blocks until both stores returned.
    """
    ns = hsession.register_namespace(**opaque_spec())
    errors: List[BaseException] = []
    results: Dict[int, kvstrata.StoreResult] = {}
    start = threading.Barrier(8)

    def worker(t: int) -> None:
        try:
            keys = chain_keys(f"thread-{t % 4}", 12)
            data = blocks_for(t % 4, 12)
            start.wait()
            results[t] = hsession.store(ns, keys, data)
            got = hsession.load(ns, keys)
            mine = results[t].stored == 12
            assert not mine or got == [True] * 12, "a writer sees its own committed blocks"
            assert all(np.array_equal(b, d) for b, d in zip(got.blocks, data) if b is not None)
        except BaseException as err:  # pragma: no cover - reported below
            errors.append(err)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    for chain in range(4):
        pair = [results[chain], results[chain + 4]]
        assert sum(r.stored for r in pair) == 12, pair
        assert sum(r.stored + r.already_present for r in pair) == 24, pair
        got = hsession.load(ns, chain_keys(f"thread-{chain}", 12))
        assert got == [True] * 12
        assert all(np.array_equal(b, d) for b, d in zip(got.blocks, blocks_for(chain, 12)))


# ---------------------------------------------------------------------- eviction and pressure


def test_eviction_under_a_small_l1(ssession: kvstrata.Session, sclient) -> None:
    ns = ssession.register_namespace(**opaque_spec())
    cap = l1_tier(sclient).capacity_bytes
    assert cap == 8 * MIB
    total = 4 * cap // BLOCK  # 4x the whole pool
    keys = chain_keys("evict", total)
    batch = 16
    stored = dropped = 0
    for start in range(0, total, batch):
        r = ssession.store(ns, keys[start:start + batch],
                           [block_bytes(11, i, BLOCK) for i in range(start, start + batch)])
        stored += r.stored
        dropped += r.dropped
        assert l1_tier(sclient).used_bytes <= cap
    assert stored > cap // BLOCK, (stored, dropped)
    assert ssession.lookup(ns, keys[:1]).hit_blocks == 0, "the oldest block should be evicted"
    assert ssession.lookup(ns, keys).hit_blocks == 0
    latest = keys[-batch:]
    assert ssession.lookup(ns, latest).hit_blocks == batch, "the newest batch should be present"
    got = ssession.load(ns, latest)
    assert got == [True] * batch
    assert all(np.array_equal(b, block_bytes(11, total - batch + i, BLOCK))
               for i, b in enumerate(got.blocks))
    tier = l1_tier(sclient)
    assert tier.evictions > 0
    assert tier.used_bytes <= tier.capacity_bytes
    assert 0 < tier.blocks <= cap // BLOCK
    per_ns = {n.fingerprint: n.blocks for n in sclient.list_namespaces().namespaces}
    assert 0 < per_ns[ns.fingerprint] <= cap // BLOCK


def test_pin_keeps_a_block_through_eviction(ssession: kvstrata.Session, sclient) -> None:
    ns = ssession.register_namespace(**opaque_spec())
    pinned = chain_keys("pinned", 2)
    data = blocks_for(12, 2)
    ssession.store(ns, pinned, data)
    assert sclient.pin(fingerprint=ns.fingerprint, keys=pinned).blocks == 2
    assert sclient.evict(fingerprint=ns.fingerprint, keys=pinned).evicted_blocks == 0, \
        "Evict skips admin-pinned blocks"
    evictions = l1_tier(sclient).evictions
    filler = chain_keys("pin-filler", 3 * (8 * MIB) // BLOCK)
    for start in range(0, len(filler), 16):
        ssession.store(ns, filler[start:start + 16], [data[0]] * len(filler[start:start + 16]))
    assert l1_tier(sclient).evictions > evictions, "the filler should have caused evictions"
    assert ssession.lookup(ns, filler[:1]).hit_blocks == 0
    assert sclient.admin_lookup(fingerprint=ns.fingerprint, keys=pinned).hit_blocks == 2
    got = ssession.load(ns, pinned)
    assert got == [True, True] and all(np.array_equal(b, d) for b, d in zip(got.blocks, data))
    assert sclient.unpin(fingerprint=ns.fingerprint, keys=pinned).blocks == 2
    assert sclient.evict(fingerprint=ns.fingerprint, keys=pinned).evicted_blocks == 2
    assert ssession.lookup(ns, pinned).hit_blocks == 0


def test_full_pool_of_pinned_blocks_drops_stores(daemon_factory) -> None:
    d = daemon_factory(SMALL_SETTINGS)
    with d.client(timeout=10.0) as c, kvstrata.Session(c, client_name="pressure") as s:
        ns = s.register_namespace(**opaque_spec())
        keys = chain_keys("pressure", 160)
        for start in range(0, len(keys), 16):
            s.store(ns, keys[start:start + 16], blocks_for(start, 16))
        present = [k for k, loc in zip(keys, c.admin_lookup(fingerprint=ns.fingerprint,
                                                            keys=keys).locations)
                   if loc.tier == pb.TIER_L1_DRAM]
        assert c.pin(fingerprint=ns.fingerprint, keys=present).blocks == len(present)
        more = chain_keys("pressure-more", 32)
        r = s.store(ns, more, blocks_for(99, 32))
        assert r.dropped > 0 and r.stored + r.dropped == 32, r
        assert l1_tier(c).used_bytes <= l1_tier(c).capacity_bytes
        counters = {x.name: x.value for x in c.get_stats().counters}
        assert counters["l1_dropped_stores"] >= r.dropped
        dropped = [k for k, f in zip(more, s.load(ns, more)) if not f]
        assert len(dropped) == r.dropped, "dropped keys are not stored"
        c.unpin(fingerprint=ns.fingerprint, keys=present)
        again = s.store(ns, dropped, blocks_for(98, len(dropped)))
        assert again.stored == len(dropped), "unpinned blocks make room again"


def test_admission_threshold_drops_unseen_keys(daemon_factory) -> None:
    d = daemon_factory({**HOST_SETTINGS, "l1.admission_threshold": "1"})
    with d.client(timeout=10.0) as c, kvstrata.Session(c, client_name="admission") as s:
        ns = s.register_namespace(**opaque_spec())
        keys = chain_keys("admission", 4)
        assert s.store(ns, keys, blocks_for(1, 4)) == kvstrata.StoreResult(dropped=4)
        # Each key is looked up (and missed) once: that admits it.
        assert s.lookup(ns, keys).hit_blocks == 0
        assert s.lookup(ns, keys[1:]).hit_blocks == 0
        assert s.lookup(ns, keys[2:]).hit_blocks == 0
        assert s.lookup(ns, keys[3:]).hit_blocks == 0
        assert s.store(ns, keys, blocks_for(1, 4)) == kvstrata.StoreResult(stored=4)
        counters = {x.name: x.value for x in c.get_stats().counters}
        assert counters["l1_not_admitted_stores"] == 4
