"""RegisterNamespace: fingerprints are deterministic, layouts stay apart, sizes follow the spec."""
from __future__ import annotations

import re

import pytest

import kvstrata
from kvstrata import pb
from kvs_testing import DTYPE_BYTES, mha_spec


def test_same_spec_same_fingerprint_and_id(session: kvstrata.Session, client) -> None:
    first = session.register_namespace(**mha_spec())
    again = session.register_namespace(**mha_spec())
    assert re.fullmatch(r"[0-9a-f]{32}", first.fingerprint)
    assert again == first
    with kvstrata.Session(client, client_name="other") as other:
        assert other.register_namespace(**mha_spec()) == first


@pytest.mark.parametrize("change", [
    {"tp_size": 2, "tp_rank": 1}, {"dtype": "float16"}, {"model": "kvstrata-test/other"},
    {"salt": "tenant-b"}, {"kv_layout": "vllm_hnd"}, {"engine": "vllm"},
    {"pp_size": 2, "pp_rank": 1}, {"tokens_per_block": 32},
], ids=lambda c: ",".join(c))
def test_different_spec_different_fingerprint(session: kvstrata.Session, change) -> None:
    base = session.register_namespace(**mha_spec())
    other = session.register_namespace(**mha_spec(**change))
    assert other.fingerprint != base.fingerprint
    assert other.namespace_id != base.namespace_id


def test_tp_rank_alone_changes_fingerprint(session: kvstrata.Session) -> None:
    rank0 = session.register_namespace(**mha_spec(tp_size=2, tp_rank=0))
    rank1 = session.register_namespace(**mha_spec(tp_size=2, tp_rank=1))
    assert rank0.fingerprint != rank1.fingerprint


def test_contract_defaults_normalize(session: kvstrata.Session) -> None:
    """tp_size/pp_size 0 mean 1; ATTENTION_KIND_UNSPECIFIED is MHA."""
    explicit = session.register_namespace(**mha_spec(tp_size=1, pp_size=1, attention="mha"))
    implicit = session.register_namespace(**mha_spec(tp_size=0, pp_size=0, attention_kind=0))
    assert implicit == explicit


@pytest.mark.parametrize("dtype", sorted(DTYPE_BYTES))
def test_bytes_per_block_mha(session: kvstrata.Session, dtype: str) -> None:
    spec = mha_spec(dtype=dtype, num_layers=3, num_kv_heads=5, head_size=96, tokens_per_block=8)
    ns = session.register_namespace(**spec)
    assert ns.bytes_per_block == 2 * 3 * 5 * 96 * 8 * DTYPE_BYTES[dtype]


def test_bytes_per_block_mla(session: kvstrata.Session) -> None:
    spec = mha_spec(attention="mla", dtype="bfloat16", num_layers=61, num_kv_heads=1,
                    head_size=576, tokens_per_block=64)
    ns = session.register_namespace(**spec)
    assert ns.bytes_per_block == 1 * 61 * 1 * 576 * 64 * 2
    mha = session.register_namespace(**{**spec, "attention": "mha"})
    assert mha.fingerprint != ns.fingerprint and mha.bytes_per_block == 2 * ns.bytes_per_block


def test_bytes_per_block_opaque(session: kvstrata.Session) -> None:
    ns = session.register_namespace(engine="other", model="opaque", dtype="uint8",
                                    kv_layout="opaque", opaque_block_bytes=123457)
    assert ns.bytes_per_block == 123457


def test_list_namespaces_shows_registration(session: kvstrata.Session, client) -> None:
    spec = mha_spec(model="kvstrata-test/listed", salt="s1")
    ns = session.register_namespace(**spec)
    listed = {n.namespace_id: n for n in client.list_namespaces().namespaces}[ns.namespace_id]
    assert listed.fingerprint == ns.fingerprint
    assert listed.bytes_per_block == ns.bytes_per_block
    assert listed.spec.model == "kvstrata-test/listed"
    assert listed.spec.salt == "<redacted>"  # a salt never leaves the daemon (issue 15)
    assert listed.spec.engine_kind == pb.ENGINE_KIND_OTHER
    assert listed.sessions >= 1


def test_fingerprint_is_stable_across_daemons(session: kvstrata.Session, daemon_factory) -> None:
    here = session.register_namespace(**mha_spec(model="kvstrata-test/stable"))
    other = daemon_factory()
    with kvstrata.Session(endpoint=other.endpoint, client_name="second-daemon") as s2:
        there = s2.register_namespace(**mha_spec(model="kvstrata-test/stable"))
    assert there.fingerprint == here.fingerprint
    assert there.bytes_per_block == here.bytes_per_block
