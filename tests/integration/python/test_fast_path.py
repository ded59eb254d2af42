"""The fast-path socket (docs/wire-protocol.md): lookup and job frames give the same checks
and answers as Control.Lookup / SubmitStore / SubmitLoad, bad frames closed, errors of the
call leaving the connection open. Without a GPU every well-formed submit ends at the
registration check, which is where both paths must agree."""
from __future__ import annotations

import os
import socket
import struct

import grpc
import pytest

import kvstrata
from kvstrata.fast_path import KIND_LOAD, KIND_STORE, MAGIC, FastPathSocket
from kvs_testing import mha_spec
from prom_text import scrape

REQUEST = struct.Struct("<IHHQIIIIQQ")
RESPONSE = struct.Struct("<IIQI")


def rpc_count(client: kvstrata.Client, method: str) -> float:
    m = scrape(client.get_status().metrics_address)
    return sum(v for (name, labels), v in m.samples.items()
               if name == "kvstrata_rpc_requests_total" and ("method", method) in labels)


@pytest.fixture
def ns(session: kvstrata.Session) -> kvstrata.RegisteredNamespace:
    return session.register_namespace(**mha_spec(model="kvstrata-test/jobs"))


def submit_both_ways(session: kvstrata.Session, ns, submit: str, keys, ids):
    """The refusal of the same submit through the job socket (the job's failed completion:
    the call returns before the answer) and through gRPC (raised), as "CODE: message"."""
    job = getattr(session, submit)(ns, 7, keys, ids)
    done = session.wait_job(job, timeout=10)
    assert not done.ok and list(done.failed_blocks) == list(range(len(keys))), done
    session.fast_path = False
    try:
        with pytest.raises(kvstrata.KVStrataError) as exc:
            getattr(session, submit)(ns, 7, keys, ids)
    finally:
        session.fast_path = True
    return done.error, f"{exc.value.code.name}: {exc.value.message}"


@pytest.mark.parametrize("submit", ["submit_load", "submit_store"])
def test_job_frames_answer_as_grpc_does(session, client, ns, submit) -> None:
    method = "FastPath.SubmitLoad" if submit == "submit_load" else "FastPath.SubmitStore"
    before = rpc_count(client, method)
    keys = [os.urandom(16) for _ in range(8)]
    fast, slow = submit_both_ways(session, ns, submit, keys, list(range(8)))
    assert fast == slow and fast.startswith("NOT_FOUND: "), (fast, slow)
    assert rpc_count(client, method) == before + 1  # The first one went over the socket.


def test_keys_of_several_lengths_go_through_grpc(session, client, ns) -> None:
    before = rpc_count(client, "Control.SubmitLoad")
    with pytest.raises(kvstrata.KVStrataError):
        session.submit_load(ns, 7, [b"a" * 16, b"b" * 20], [0, 1])
    assert rpc_count(client, "Control.SubmitLoad") == before + 1


def raw_frame(session, ns, kind=KIND_LOAD, version=1, count=2, key_bytes=16, ids=None,
              session_id=None) -> bytes:
    ids = list(range(count)) if ids is None else ids
    header = REQUEST.pack(MAGIC, version, kind,
                          session.session_id if session_id is None else session_id,
                          ns.namespace_id, count, key_bytes, 0, 7, 0)
    return header + b"k" * (count * key_bytes) + struct.pack(f"<{len(ids)}I", *ids)


def exchange(sock: socket.socket, frame: bytes):
    sock.sendall(frame)
    head = b""
    while len(head) < RESPONSE.size:
        chunk = sock.recv(RESPONSE.size - len(head))
        if not chunk:
            return None
        head += chunk
    magic, status, job, size = RESPONSE.unpack(head)
    message = sock.recv(size, socket.MSG_WAITALL) if size else b""
    return magic, status, job, message.decode()


@pytest.fixture
def raw(session):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(session.open_response.lookup_socket)
    yield sock
    sock.close()


@pytest.mark.parametrize("change, words", [
    ({"version": 3}, "version"), ({"kind": 3}, "kind"), ({"count": 0}, "key_count"),
    ({"key_bytes": 33}, "keys"),
], ids=["version", "kind", "no keys", "33-byte keys"])
def test_untrustworthy_job_header_is_invalid_argument_and_closes(session, client, ns, raw,
                                                                 change, words) -> None:
    answer = exchange(raw, raw_frame(session, ns, **change)[:48])
    assert answer is not None and answer[0] == MAGIC
    assert answer[1] == grpc.StatusCode.INVALID_ARGUMENT.value[0], answer
    assert words in answer[3], answer
    assert raw.recv(1) == b""  # Closed.
    assert client.is_serving()


@pytest.mark.parametrize("version", [1, 2])
def test_errors_of_the_call_keep_the_connection(session, ns, raw, version) -> None:
    """Version 2 (completions on the connection) is answered as version 1: a refused job
    has no completion, so nothing but the answer comes."""
    unknown = exchange(raw, raw_frame(session, ns, version=version, session_id=(1 << 63) + 5))
    assert unknown[1] == grpc.StatusCode.NOT_FOUND.value[0] and "session" in unknown[3]
    again = exchange(raw, raw_frame(session, ns, version=version))  # Same connection.
    assert again[1] == grpc.StatusCode.NOT_FOUND.value[0] and "registration" in again[3]
    # Lookup frames still work on a connection that carried job frames.
    lookup = struct.pack("<IHHQIIII", 0x4C53564B, 1, 0, session.session_id, ns.namespace_id,
                         1, 16, 0) + b"k" * 16
    raw.sendall(lookup)
    head = raw.recv(36, socket.MSG_WAITALL)
    assert struct.unpack("<II", head[:8]) == (0x4C53564B, 0)


def test_job_socket_reports_a_gone_daemon_as_unavailable(tmp_path) -> None:
    js = FastPathSocket(str(tmp_path / "nothing.sock"), timeout=1.0)
    with pytest.raises(kvstrata.DaemonUnavailable):
        js.submit(KIND_STORE, 1, 1, 1, [b"k"], [0])


def test_lookups_over_the_socket_answer_as_grpc_does(session, client, ns) -> None:
    keys = [os.urandom(16) for _ in range(6)]
    assert session.store(ns, keys[:4], [bytes([i]) * ns.bytes_per_block for i in range(4)]).stored == 4
    before = rpc_count(client, "FastPath.Lookup")
    answers = []
    for fast in (True, False):
        session.fast_path = fast
        plain = session.lookup(ns, keys)
        leased = session.lookup(ns, keys, lease=True, lease_ttl_ms=2000)
        answers.append((plain.hit_blocks, plain.tiers, leased.hit_blocks, leased.tiers,
                        leased.lease_id != 0, leased.lease_expires_unix_ms > 0))
        assert session.load(ns, keys[:leased.hit_blocks], lease_id=leased.lease_id).hit_blocks == 4
    session.fast_path = True
    assert answers[0] == answers[1] == (4, [1] * 4, 4, [1] * 4, True, True), answers
    assert rpc_count(client, "FastPath.Lookup") == before + 2
    with pytest.raises(kvstrata.KVStrataError) as exc:  # Errors too: a namespace never registered.
        session.lookup(kvstrata.RegisteredNamespace(9999, "f" * 32, 16), keys)
    assert exc.value.code == grpc.StatusCode.NOT_FOUND


def test_idle_connections_cannot_lock_new_callers_out(daemon_factory) -> None:
    """Issue 15: 300 idle connections held the lookup socket's 256 slots and every new
    caller was refused. Now the connection idle the longest makes room: 1,100 idle ones on
    its 1,024 slots."""
    import time
    from kvs_testing import raise_fd_limit
    assert raise_fd_limit(2 * 1100 + 512) >= 2 * 1100 + 256
    d = daemon_factory()
    with d.client(timeout=10.0) as c, kvstrata.Session(c, client_name="idle-test") as s:
        ns_ = s.register_namespace(**mha_spec(model="kvstrata-test/idle"))
        path = s.open_response.lookup_socket
        idle = []
        try:
            for _ in range(1100):
                sock = socket.socket(socket.AF_UNIX)
                sock.connect(path)
                idle.append(sock)
            time.sleep(1.5)  # they have all waited over a second for a frame
            fast = FastPathSocket(path, timeout=5.0)
            for _ in range(3):
                hits, _, _, _ = fast.lookup(s.session_id, ns_.namespace_id, [b"k" * 16], False)
                assert hits == 0
            fast.close()
        finally:
            for sock in idle:
                sock.close()
        assert d.running()


def test_lookup_says_which_path_answered(session, ns) -> None:
    """LookupResult.fast: True over the lookup socket, False over gRPC; same answer."""
    keys = [os.urandom(32) for _ in range(3)]
    session.store(ns, keys[:2], [bytes(ns.bytes_per_block)] * 2)
    fast = session.lookup(ns, keys)
    session.fast_path = False
    slow = session.lookup(ns, keys)
    session.fast_path = True
    assert fast.fast and not slow.fast
    want = (2, [kvstrata.Tier.L1] * 2)
    assert (fast.hit_blocks, fast.tiers) == (slow.hit_blocks, slow.tiers) == want

