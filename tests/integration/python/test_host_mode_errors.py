"""Host mode on a real kvstratad: crashed clients, bad input and the admin cache calls
(store/load, leases and eviction: test_host_mode.py; fixtures: conftest.py).
"""
from __future__ import annotations

import signal

import grpc
import pytest

import kvstrata
from kvstrata import pb
from host_child import chain_keys
from kvs_testing import Daemon, assert_code, assert_serving, wait_until
from host_helpers import (BLOCK, HOST_SETTINGS, MIB, blocks_for, child_json, l1_tier,
                         opaque_spec, run_child)


# ---------------------------------------------------------------------- crashed clients


def _session_ids(client: kvstrata.Client) -> set:
    return {s.session_id for s in client.list_sessions().sessions}


def test_client_killed_mid_store_leaks_nothing(host_daemon: Daemon, hclient,
                                               hsession: kvstrata.Session) -> None:
    spec = opaque_spec()
    ns = hsession.register_namespace(**spec)
    before = l1_tier(hclient)
    proc = run_child("die-mid-store", host_daemon, spec=spec, chain="killed", count=8, seed=1,
                     heartbeat_timeout_ms=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    info = child_json(proc)
    assert (info["reserved"], info["written"]) == (8, 4) and info["reservation_id"] != 0
    assert info["l1_used_bytes"] == before.used_bytes + 8 * BLOCK, "reserved slots are held"
    keys = chain_keys("killed", 8)
    assert hsession.lookup(ns, keys).hit_blocks == 0, "uncommitted blocks must stay invisible"
    assert hclient.admin_lookup(fingerprint=ns.fingerprint, keys=keys).hit_blocks == 0
    assert wait_until(lambda: info["session_id"] not in _session_ids(hclient), 10.0), \
        "the killed client's session did not expire"
    assert wait_until(lambda: l1_tier(hclient).used_bytes == before.used_bytes, 5.0), \
        f"L1 used bytes {l1_tier(hclient).used_bytes} != {before.used_bytes}: leaked slots"
    assert l1_tier(hclient).blocks == before.blocks
    assert hsession.lookup(ns, keys).hit_blocks == 0
    # Its reservation ended with it.
    with pytest.raises(kvstrata.KVStrataError) as exc:
        hclient.commit_store(session_id=hsession.session_id, reservation_id=info["reservation_id"])
    assert exc.value.code in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION)
    # The keys can be stored afresh.
    assert hsession.store(ns, keys, blocks_for(1, 8)).stored == 8


def test_client_killed_holding_a_load_and_lease(host_daemon: Daemon, hclient,
                                                hsession: kvstrata.Session) -> None:
    spec = opaque_spec()
    ns = hsession.register_namespace(**spec)
    keys = chain_keys("killed-load", 3)
    hsession.store(ns, keys, blocks_for(8, 3))
    proc = run_child("die-holding-load", host_daemon, spec=spec, chain="killed-load", count=3,
                     heartbeat_timeout_ms=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    info = child_json(proc)
    assert (info["hit_blocks"], info["ready"]) == (3, 3) and info["load_id"] != 0
    assert hclient.evict(fingerprint=ns.fingerprint, keys=keys).evicted_blocks == 0, \
        "blocks under a load/lease are in use"
    assert wait_until(lambda: info["session_id"] not in _session_ids(hclient), 10.0)
    assert hclient.evict(fingerprint=ns.fingerprint, keys=keys).evicted_blocks == 3, \
        "the dead session's load and lease should have ended"


# ---------------------------------------------------------------------- bad input


def test_wrong_block_size_fails_before_any_call(hsession: kvstrata.Session, hclient) -> None:
    ns = hsession.register_namespace(**opaque_spec())
    keys = chain_keys("wrong-size", 2)
    used = l1_tier(hclient).used_bytes
    with pytest.raises(ValueError, match=r"blocks\[1\] has 65535 bytes"):
        hsession.store(ns, keys, [bytes(BLOCK), bytes(BLOCK - 1)])
    with pytest.raises(ValueError, match=r"out\[0\]"):
        hsession.load(ns, keys, out=[bytearray(BLOCK + 1), bytearray(BLOCK)])
    assert l1_tier(hclient).used_bytes == used
    assert hsession.lookup(ns, keys).hit_blocks == 0


@pytest.mark.parametrize("key", [b"k" * 33, b""], ids=["33-bytes", "empty"])
def test_bad_key_is_invalid_argument(hsession: kvstrata.Session, hclient, key: bytes) -> None:
    ns = hsession.register_namespace(**opaque_spec())
    good = chain_keys("bad-key", 1)[0]
    for call in (lambda: hsession.store(ns, [good, key], [bytes(BLOCK)] * 2),
                 lambda: hsession.lookup(ns, [good, key]),
                 lambda: hsession.load(ns, [good, key])):
        with pytest.raises(kvstrata.KVStrataError) as exc:
            call()
        assert_code(exc, grpc.StatusCode.INVALID_ARGUMENT)
    assert hsession.lookup(ns, [good]).hit_blocks == 0, "nothing of the bad store is visible"
    assert_serving(hclient)


def test_commit_of_another_sessions_reservation(hsession: kvstrata.Session, hclient) -> None:
    ns = hsession.register_namespace(**opaque_spec())
    r = hclient.reserve_store(session_id=hsession.session_id, namespace_id=ns.namespace_id,
                              keys=chain_keys("foreign", 2))
    with kvstrata.Session(hclient, client_name="thief") as other:
        for fields in ({}, {"abort": True}):
            with pytest.raises(kvstrata.KVStrataError) as exc:
                hclient.commit_store(session_id=other.session_id,
                                     reservation_id=r.reservation_id, **fields)
            assert_code(exc, grpc.StatusCode.FAILED_PRECONDITION)
    assert hclient.commit_store(session_id=hsession.session_id,
                                reservation_id=r.reservation_id).committed_blocks == 2


def test_double_commit_and_commit_after_abort(hsession: kvstrata.Session, hclient) -> None:
    ns = hsession.register_namespace(**opaque_spec())
    sid = hsession.session_id
    r = hclient.reserve_store(session_id=sid, namespace_id=ns.namespace_id,
                              keys=chain_keys("double", 2))
    assert hclient.commit_store(session_id=sid, reservation_id=r.reservation_id).committed_blocks == 2
    for fields in ({}, {"abort": True}):
        with pytest.raises(kvstrata.KVStrataError) as exc:
            hclient.commit_store(session_id=sid, reservation_id=r.reservation_id, **fields)
        assert_code(exc, grpc.StatusCode.FAILED_PRECONDITION)
    r = hclient.reserve_store(session_id=sid, namespace_id=ns.namespace_id,
                              keys=chain_keys("double-abort", 2))
    hclient.commit_store(session_id=sid, reservation_id=r.reservation_id, abort=True)
    with pytest.raises(kvstrata.KVStrataError) as exc:
        hclient.commit_store(session_id=sid, reservation_id=r.reservation_id)
    assert_code(exc, grpc.StatusCode.FAILED_PRECONDITION)


def test_commit_with_bad_index(hsession: kvstrata.Session, hclient) -> None:
    ns = hsession.register_namespace(**opaque_spec())
    sid = hsession.session_id
    r = hclient.reserve_store(session_id=sid, namespace_id=ns.namespace_id,
                              keys=chain_keys("bad-index", 2))
    with pytest.raises(kvstrata.KVStrataError) as exc:
        hclient.commit_store(session_id=sid, reservation_id=r.reservation_id, written=[2])
    assert_code(exc, grpc.StatusCode.INVALID_ARGUMENT)
    hclient.commit_store(session_id=sid, reservation_id=r.reservation_id, abort=True)


@pytest.mark.parametrize("rpc, fields", [
    ("commit_store", {"reservation_id": 987654321}),
    ("release_load", {"load_id": 987654321}),
    ("release_lease", {"lease_id": 987654321}),
])
def test_unknown_ids_are_not_found(hsession: kvstrata.Session, hclient, rpc, fields) -> None:
    with pytest.raises(kvstrata.KVStrataError) as exc:
        getattr(hclient, rpc)(session_id=hsession.session_id, **fields)
    assert_code(exc, grpc.StatusCode.NOT_FOUND)


def test_release_load_twice(hsession: kvstrata.Session, hclient) -> None:
    ns = hsession.register_namespace(**opaque_spec())
    keys = chain_keys("release-twice", 1)
    hsession.store(ns, keys, blocks_for(1, 1))
    r = hclient.acquire_load(session_id=hsession.session_id, namespace_id=ns.namespace_id,
                             keys=keys)
    assert r.load_id != 0
    hclient.release_load(session_id=hsession.session_id, load_id=r.load_id)
    with pytest.raises(kvstrata.KVStrataError) as exc:
        hclient.release_load(session_id=hsession.session_id, load_id=r.load_id)
    assert_code(exc, grpc.StatusCode.NOT_FOUND)


def test_block_larger_than_a_slab_is_resource_exhausted(hsession: kvstrata.Session, hclient) -> None:
    ns = hsession.register_namespace(**opaque_spec(block=8 * MIB))  # slabs are 4 MiB
    with pytest.raises(kvstrata.KVStrataError) as exc:
        hsession.store(ns, chain_keys("huge", 1), [bytes(8 * MIB)])
    assert_code(exc, grpc.StatusCode.RESOURCE_EXHAUSTED)
    assert_serving(hclient)


def test_store_larger_than_the_pool_is_resource_exhausted(hsession: kvstrata.Session, hclient) -> None:
    ns = hsession.register_namespace(**opaque_spec(block=2 * MIB))
    count = 40  # 80 MiB > the 64 MiB pool
    block = bytes(2 * MIB)
    used = l1_tier(hclient).used_bytes
    with pytest.raises(kvstrata.KVStrataError) as exc:
        hsession.store(ns, chain_keys("too-much", count), [block] * count)
    assert_code(exc, grpc.StatusCode.RESOURCE_EXHAUSTED)
    assert l1_tier(hclient).used_bytes == used
    assert_serving(hclient)


def test_unregistered_namespace_is_rejected(hsession: kvstrata.Session, hclient) -> None:
    with pytest.raises(kvstrata.KVStrataError) as exc:
        hclient.reserve_store(session_id=hsession.session_id, namespace_id=999_999,
                              keys=[b"k"])
    assert exc.value.code in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION)


# ---------------------------------------------------------------------- admin


def test_admin_lookup_by_fingerprint(hsession: kvstrata.Session, hclient) -> None:
    ns = hsession.register_namespace(**opaque_spec())
    keys = chain_keys("admin-lookup", 5)
    hsession.store(ns, [keys[i] for i in (0, 1, 3)], blocks_for(1, 3))
    r = hclient.admin_lookup(fingerprint=ns.fingerprint, keys=keys)
    assert r.hit_blocks == 2
    assert [l.tier for l in r.locations] == [pb.TIER_L1_DRAM, pb.TIER_L1_DRAM,
                                             pb.TIER_UNSPECIFIED, pb.TIER_L1_DRAM,
                                             pb.TIER_UNSPECIFIED]
    with pytest.raises(kvstrata.KVStrataError) as exc:
        hclient.admin_lookup(fingerprint="0" * 32, keys=keys)
    assert_code(exc, grpc.StatusCode.NOT_FOUND)


def test_evict_removes_blocks(hsession: kvstrata.Session, hclient) -> None:
    ns = hsession.register_namespace(**opaque_spec())
    keys = chain_keys("evict-admin", 4)
    hsession.store(ns, keys, blocks_for(1, 4))
    before = l1_tier(hclient)
    assert hclient.evict(fingerprint=ns.fingerprint, keys=[keys[1]]).evicted_blocks == 1
    assert hsession.lookup(ns, keys).hit_blocks == 1
    assert hsession.load(ns, keys) == [True, False, True, True]
    after = l1_tier(hclient)
    assert after.used_bytes == before.used_bytes - BLOCK and after.blocks == before.blocks - 1
    assert hclient.evict(fingerprint=ns.fingerprint, keys=[keys[1]]).evicted_blocks == 0


def test_list_namespaces_counts_blocks(hsession: kvstrata.Session, hclient) -> None:
    ns = hsession.register_namespace(**opaque_spec())
    hsession.store(ns, chain_keys("count", 6), blocks_for(1, 6))
    info = {n.fingerprint: n for n in hclient.list_namespaces().namespaces}[ns.fingerprint]
    assert (info.blocks, info.bytes_per_block, info.namespace_id) == (6, BLOCK, ns.namespace_id)
    stats = hclient.get_stats()
    l1 = next(t for t in stats.tiers if t.tier == pb.TIER_L1_DRAM)
    assert l1.blocks >= 6 and l1.hits >= 0


def test_clear_streams_progress_and_empties_l1(daemon_factory) -> None:
    d = daemon_factory(HOST_SETTINGS)
    with d.client(timeout=10.0) as c, kvstrata.Session(c, client_name="clear") as s:
        a = s.register_namespace(**opaque_spec())
        b = s.register_namespace(**opaque_spec())
        s.store(a, chain_keys("clear-a", 6), blocks_for(1, 6))
        s.store(b, chain_keys("clear-b", 4), blocks_for(2, 4))
        assert l1_tier(c).blocks == 10
        # One namespace first.
        progress = list(c.clear(fingerprint=a.fingerprint))
        assert progress and progress[-1].done and not any(p.done for p in progress[:-1])
        assert s.lookup(a, chain_keys("clear-a", 6)).hit_blocks == 0
        assert s.lookup(b, chain_keys("clear-b", 4)).hit_blocks == 4
        # Then everything.
        progress = list(c.clear())
        assert progress[-1].done and not any(p.done for p in progress[:-1])
        last = progress[-1]
        assert last.done_units == last.total_units
        tier = l1_tier(c)
        assert (tier.blocks, tier.used_bytes) == (0, 0)
        assert s.lookup(b, chain_keys("clear-b", 4)).hit_blocks == 0
        per_ns = {n.fingerprint: n.blocks for n in c.list_namespaces().namespaces}
        assert per_ns.get(a.fingerprint, 0) == 0 and per_ns.get(b.fingerprint, 0) == 0
        # The cache works after a clear.
        assert s.store(a, chain_keys("clear-a", 2), blocks_for(1, 2)).stored == 2
