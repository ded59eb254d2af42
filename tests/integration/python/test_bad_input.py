"""Bad input gets a clear gRPC status, and the daemon keeps serving afterwards."""
from __future__ import annotations

import grpc
import pytest

import kvstrata
from kvs_testing import assert_code, assert_serving, mha_spec

UNKNOWN_SESSION = (1 << 63) + 12345


@pytest.mark.parametrize("rpc, fields", [
    ("heartbeat", {}), ("close_session", {}),
    ("register_namespace", {"spec": kvstrata.namespace_spec(**mha_spec())}),
    ("lookup", {"namespace_id": 1, "keys": [b"k"]}),
    ("poll_completions", {}),
])
def test_unknown_session_is_not_found(client: kvstrata.Client, rpc: str, fields) -> None:
    with pytest.raises(kvstrata.KVStrataError) as exc:
        getattr(client, rpc)(session_id=UNKNOWN_SESSION, **fields)
    assert_code(exc, grpc.StatusCode.NOT_FOUND)
    assert_serving(client)


@pytest.mark.parametrize("field, change", [
    ("model", {"model": ""}),
    ("model", {"model": "m" * 513}),
    ("num_layers", {"num_layers": 0}),
    ("num_layers", {"num_layers": 4097}),
    ("num_kv_heads", {"num_kv_heads": 0}),
    ("head_size", {"head_size": 0}),
    ("tokens_per_block", {"tokens_per_block": 0}),
    ("tp_rank", {"tp_size": 2, "tp_rank": 2}),
    ("tp_rank", {"tp_size": 0, "tp_rank": 1}),
    ("pp_rank", {"pp_size": 4, "pp_rank": 7}),
    ("engine_kind", {"engine_kind": 0}),
    ("dtype", {"dtype": 0}),
    ("dtype", {"dtype": 99}),
    ("kv_layout", {"kv_layout": 0}),
    ("salt", {"salt": "s" * 257}),
    ("opaque_block_bytes", {"kv_layout": "opaque", "opaque_block_bytes": 0}),
    ("opaque_block_bytes", {"kv_layout": "opaque", "opaque_block_bytes": (1 << 30) + 1}),
], ids=lambda v: v if isinstance(v, str) else ",".join(f"{k}={str(x)[:8]}" for k, x in v.items()))
def test_bad_namespace_spec_is_invalid_argument(session: kvstrata.Session, client, field, change) -> None:
    with pytest.raises(kvstrata.KVStrataError) as exc:
        session.register_namespace(**mha_spec(**change))
    assert_code(exc, grpc.StatusCode.INVALID_ARGUMENT)
    assert field in exc.value.message, f"the message should name {field}: {exc.value.message}"
    assert_serving(client)


@pytest.fixture
def namespace_id(session: kvstrata.Session) -> int:
    return session.register_namespace(**mha_spec(model="kvstrata-test/lookup")).namespace_id


@pytest.mark.parametrize("keys", [[b"k" * 33], [b"ok", b""], [b"a"] * 65537],
                         ids=["33-byte key", "empty key", "65537 keys"])
def test_bad_lookup_keys_are_invalid_argument(session: kvstrata.Session, client, namespace_id,
                                              keys) -> None:
    with pytest.raises(kvstrata.KVStrataError) as exc:
        client.lookup(session_id=session.session_id, namespace_id=namespace_id, keys=keys)
    assert_code(exc, grpc.StatusCode.INVALID_ARGUMENT)
    assert_serving(client)


def test_lookup_unknown_namespace_is_not_found(session: kvstrata.Session, client) -> None:
    with pytest.raises(kvstrata.KVStrataError) as exc:
        client.lookup(session_id=session.session_id, namespace_id=4_000_000_000, keys=[b"k"])
    assert_code(exc, grpc.StatusCode.NOT_FOUND)
    assert_serving(client)


def test_garbage_request_bytes(daemon, client: kvstrata.Client) -> None:
    """A request that is not a valid protobuf is refused; the daemon survives it."""
    channel = grpc.insecure_channel(f"unix://{daemon.socket}")
    try:
        call = channel.unary_unary("/kvstrata.v1.Control/Heartbeat",
                                   request_serializer=lambda b: b, response_deserializer=lambda b: b)
        with pytest.raises(grpc.RpcError) as exc:
            call(b"\x0a\xff\xff\xff\xff\x0f", timeout=5)
        assert exc.value.code() in (grpc.StatusCode.INTERNAL, grpc.StatusCode.INVALID_ARGUMENT)
    finally:
        channel.close()
    assert_serving(client)


@pytest.mark.parametrize("rpc", ["submit_load", "submit_store"])
@pytest.mark.parametrize("fields, names", [
    ({"blocks": [kvstrata.pb.BlockTransfer(key=b"k", block_id=0)], "keys": [b"k"],
      "block_ids": [0]}, "not both"),
    ({"keys": [b"a", b"b"], "block_ids": [0]}, "block_ids"),
    ({"keys": [b"k" * 33], "block_ids": [0]}, "keys"),
    ({"keys": [], "block_ids": []}, "keys"),
    ({"blocks": [kvstrata.pb.BlockTransfer(key=b"", block_id=0)]}, "keys"),
], ids=["both forms", "lengths differ", "33-byte key", "no blocks", "empty key"])
def test_bad_job_blocks_are_invalid_argument(session: kvstrata.Session, client, namespace_id,
                                             rpc: str, fields, names) -> None:
    # Checked before the registration (and the GPU): the same answer with or without one.
    with pytest.raises(kvstrata.KVStrataError) as exc:
        getattr(client, rpc)(session_id=session.session_id, namespace_id=namespace_id,
                             registration_id=1, **fields)
    assert_code(exc, grpc.StatusCode.INVALID_ARGUMENT)
    assert names in exc.value.message, exc.value.message
    assert_serving(client)


def test_daemon_announces_packed_transfers(session: kvstrata.Session) -> None:
    assert session.open_response.packed_transfers


@pytest.mark.parametrize("rpc", ["evict", "clear"])
def test_huge_unknown_fingerprint_is_not_found_not_echoed(client: kvstrata.Client, rpc) -> None:
    with pytest.raises(kvstrata.KVStrataError) as exc:
        result = getattr(client, rpc)(fingerprint="f" * 100_000, keys=[b"k"]) if rpc == "evict" \
            else list(client.clear(fingerprint="f" * 100_000))
        del result
    assert_code(exc, grpc.StatusCode.NOT_FOUND)
    assert len(exc.value.message) < 300, exc.value.message[:100]
    assert_serving(client)
