"""One chain in several namespaces in one round trip, leases ended in one release frame, and
a lease that another session of the same tenant loads with (issue 44 items 2 and 3;
docs/wire-protocol.md): a real kvstratad over its fast-path socket, the answers checked
against one lookup per namespace over gRPC, and one test per class of bad frame."""
from __future__ import annotations

import os
import socket
import struct
from typing import List

import grpc
import pytest

import kvstrata
from kvs_testing import mha_spec
from prom_text import scrape

LOOKUP = struct.Struct("<IHHQIIII")
RELEASE = struct.Struct("<IHHQII")
RESPONSE = struct.Struct("<IIIIQQI")
LOOKUP_MAGIC, RELEASE_MAGIC = 0x4C53564B, 0x5253564B
UNKNOWN_REG = 7  # no GPU here: a job load ends at its registration check


def metric(client: kvstrata.Client, name: str, method: str = "") -> float:
    m = scrape(client.get_status().metrics_address)
    return sum(v for (n, labels), v in m.samples.items()
               if n == name and (not method or ("method", method) in labels))


@pytest.fixture
def three(session: kvstrata.Session) -> List[kvstrata.RegisteredNamespace]:
    """Three ranks' namespaces holding 6, 4 and 5 leading keys of one chain."""
    spaces = [session.register_namespace(**mha_spec(model="kvstrata-test/namespaces",
                                                    tp_size=4, tp_rank=r)) for r in range(3)]
    return spaces


def chain(session, spaces, held: List[int], n: int = 8) -> List[bytes]:
    keys = [os.urandom(32) for _ in range(n)]
    for ns, count in zip(spaces, held):
        block = bytes(ns.bytes_per_block)
        assert session.store(ns, keys[:count], [block] * count).stored == count
    return keys


def test_one_round_trip_answers_as_one_lookup_per_namespace(session, client, three) -> None:
    keys = chain(session, three, [6, 4, 5])
    before = metric(client, "kvstrata_rpc_requests_total", "FastPath.Lookup")
    one = session.lookup_namespaces(three, keys)
    assert metric(client, "kvstrata_rpc_requests_total", "FastPath.Lookup") == before + 1
    assert (one.hit_blocks, one.tiers, one.lease_ids, one.fast, one.round_trips) == \
        (4, [kvstrata.Tier.L1] * 4, [0, 0, 0], True, 1)
    session.fast_path = False
    each = session.lookup_namespaces(three, keys)
    session.fast_path = True
    assert (each.hit_blocks, each.tiers, each.fast, each.round_trips) == (4, one.tiers, False, 3)
    assert session.lookup_namespaces(three[:1], keys).hit_blocks == 6


def test_each_namespace_leases_what_it_was_asked_and_one_frame_ends_them(session, client,
                                                                         three) -> None:
    keys = chain(session, three, [6, 4, 5])
    leased = session.lookup_namespaces(three, keys, lease=True, lease_ttl_ms=30000)
    assert leased.hit_blocks == 4 and all(leased.lease_ids) and leased.lease_expires_unix_ms
    assert len(set(leased.lease_ids)) == 3
    assert metric(client, "kvstrata_leases_active") >= 3
    before = metric(client, "kvstrata_rpc_requests_total", "FastPath.ReleaseLeases")
    assert session.release_leases(leased.lease_ids) == 3
    assert session.release_leases(leased.lease_ids) == 0          # ended: skipped
    assert metric(client, "kvstrata_rpc_requests_total", "FastPath.ReleaseLeases") == \
        before + 2
    session.fast_path = False                                       # the gRPC way, the same
    leased = session.lookup_namespaces(three, keys, lease=True)
    assert session.release_leases(leased.lease_ids + [12345]) == 3
    session.fast_path = True


def test_a_namespace_without_the_chain_ends_the_lookup(session, three) -> None:
    keys = chain(session, three, [0, 4, 5])
    r = session.lookup_namespaces(three, keys, lease=True)
    assert (r.hit_blocks, r.tiers, r.lease_ids) == (0, [], [0, 0, 0])


def test_an_unknown_namespace_fails_the_frame_and_frees_the_leases_before_it(session, client,
                                                                             three) -> None:
    keys = chain(session, three, [6, 6, 6])
    active = metric(client, "kvstrata_leases_active")
    ghost = kvstrata.RegisteredNamespace(99999, "f" * 32, 16)
    with pytest.raises(kvstrata.KVStrataError) as exc:
        session.lookup_namespaces([three[0], three[1], ghost], keys, lease=True)
    assert exc.value.code == grpc.StatusCode.NOT_FOUND
    assert metric(client, "kvstrata_leases_active") == active      # both released again
    assert session.lookup_namespaces(three, keys).hit_blocks == 6  # the connection stays


def test_another_session_of_the_tenant_loads_with_the_lease(client, session, three) -> None:
    keys = chain(session, three, [6, 6, 6])
    with kvstrata.Session(client, client_name="pytest-worker") as worker:
        for ns in three:
            worker.register_namespace(**mha_spec(model="kvstrata-test/namespaces", tp_size=4,
                                                 tp_rank=ns_rank(three, ns)))
        leased = session.lookup_namespaces(three, keys, lease=True, lease_ttl_ms=30000)
        # A host-mode load consumes it: nothing is left for the scheduler to release.
        got = worker.load(three[0], keys[:6], lease_id=leased.lease_ids[0])
        assert got.hit_blocks == 6
        # A job load takes it over before its registration check (no GPU here).
        job = worker.submit_load(three[1], UNKNOWN_REG, keys[:6], range(6),
                                 lease_id=leased.lease_ids[1])
        assert not worker.wait_job(job, timeout=10).ok
        assert session.release_leases(leased.lease_ids) == 1        # only rank 2's was left
        assert worker.release_leases([leased.lease_ids[1]]) == 1    # the worker's now


def ns_rank(spaces, ns) -> int:
    return spaces.index(ns)


def raw(session: kvstrata.Session) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(session._conn.fast_path_address())
    return s


def closed_with(sock: socket.socket, status: int) -> None:
    head = sock.recv(RESPONSE.size, socket.MSG_WAITALL)
    magic, got, _, tiers, _, _, message = RESPONSE.unpack(head)
    assert (magic, got) == (LOOKUP_MAGIC, status)
    sock.recv(tiers + message, socket.MSG_WAITALL)
    try:
        assert sock.recv(1) == b""          # closed by the daemon
    except ConnectionResetError:
        pass                                # closed with bytes of ours unread: also closed
    sock.close()


@pytest.mark.parametrize("count", [0, 65])
def test_a_namespace_count_out_of_range_is_rejected_and_closed(session, three, count) -> None:
    s = raw(session)
    # The header alone: the daemon reads no further than it (bytes of ours it never read
    # would turn its close into a reset that can overtake its answer).
    s.sendall(LOOKUP.pack(LOOKUP_MAGIC, 2, 0, session.session_id, count, 1, 32, 0))
    closed_with(s, grpc.StatusCode.INVALID_ARGUMENT.value[0])
    assert session.lookup_namespaces(three, [b"k" * 32]).hit_blocks == 0


@pytest.mark.parametrize("version,flags,count,reserved", [(2, 0, 1, 0), (1, 1, 1, 0),
                                                          (1, 0, 0, 0), (1, 0, 4097, 0),
                                                          (1, 0, 1, 9)])
def test_a_bad_release_frame_is_rejected_and_closed(session, version, flags, count,
                                                    reserved) -> None:
    s = raw(session)
    s.sendall(RELEASE.pack(RELEASE_MAGIC, version, flags, session.session_id, count, reserved) +
              b"\0" * 8)
    closed_with(s, grpc.StatusCode.INVALID_ARGUMENT.value[0])


def test_a_release_for_an_unknown_session_is_answered_and_the_connection_stays(session) -> None:
    s = raw(session)
    for _ in range(2):
        s.sendall(RELEASE.pack(RELEASE_MAGIC, 1, 0, session.session_id + 999, 1, 0) +
                  struct.pack("<Q", 5))
        magic, status, released, tiers, _, _, message = RESPONSE.unpack(
            s.recv(RESPONSE.size, socket.MSG_WAITALL))
        assert (magic, status, released) == (LOOKUP_MAGIC, grpc.StatusCode.NOT_FOUND.value[0], 0)
        assert b"session" in s.recv(tiers + message, socket.MSG_WAITALL)
    s.close()
