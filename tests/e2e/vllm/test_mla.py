"""MLA in vLLM's real Scheduler: the latent KV is the same on every tensor-parallel rank,
so KVStrata stores it once (rank 0, one namespace for all ranks) and every rank loads it."""
from __future__ import annotations

from harness import Engine
from kvstrata import pb
from test_scheduler import PROMPT, drain_stores, ext, run_and_verify


def mla(make, model_dir, daemon, tp: int) -> Engine:
    return make(model_dir, ext(daemon), tp=tp, mla=True)


def l1_bytes(daemon) -> int:
    with daemon.client() as c:
        return sum(t.used_bytes for t in c.list_tiers().tiers if t.tier == pb.TIER_L1_DRAM)


def test_tp2_stores_the_latent_once_and_both_ranks_load_it(model_dir, daemon, engines):
    a = mla(engines, model_dir, daemon, tp=2)
    assert a.connector.scheduler.fields.keys() == {(0, 0)}   # one namespace for both ranks
    first = a.add(PROMPT, max_tokens=4)
    run_and_verify(a, first.request_id)
    drain_stores(a)
    with daemon.client() as c:
        (ns,) = c.list_namespaces().namespaces
    assert ns.spec.tp_size == 2 and ns.spec.tp_rank == 0 and ns.blocks == 6
    b = mla(engines, model_dir, daemon, tp=2)
    req = b.add(PROMPT, max_tokens=4)
    b.step()
    assert b.scheduler.requests[req.request_id].num_computed_tokens >= 96
    run_and_verify(b, req.request_id)       # both ranks' KV checked byte for byte
    assert b.outputs[req.request_id] == a.outputs[first.request_id]
    assert not b.invalid_reported


def test_tp2_holds_the_bytes_of_tp1(model_dir, daemon, engines):
    """L1 bytes per stored token at TP=2 equal TP=1's: half of one copy per rank."""
    one = mla(engines, model_dir, daemon, tp=1)
    run_and_verify(one, one.add(PROMPT, max_tokens=4).request_id)
    drain_stores(one)
    tp1 = l1_bytes(daemon)
    two = mla(engines, model_dir, daemon, tp=2)
    run_and_verify(two, two.add(PROMPT[::-1], max_tokens=4).request_id)
    drain_stores(two)
    assert tp1 > 0 and l1_bytes(daemon) - tp1 == tp1
