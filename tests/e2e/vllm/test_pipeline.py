"""Pipeline parallelism in vLLM's real Scheduler against a real kvstratad.

harness.Engine(pp=2) splits the tiny model's two layers as vLLM's models do (get_pp_indices:
stage 0 holds layer 0, stage 1 layer 1) and hands the scheduler stage 0's KV cache config,
as vLLM's engine does. Each stage stores and loads its own layers in namespaces of its own
(pp_rank, the stage's layer count); a unit is a hit only when every stage -- every
tensor-parallel rank of each -- holds it. Loaded KV is checked byte for byte on every worker:
each layer's values differ, so a stage that loaded another stage's bytes would be caught.
"""
from __future__ import annotations

import multiprocessing
import socket
import traceback
from typing import Any, Dict, List

import pytest
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole

from harness import (BLOCK, Engine, kv_cache_config, stage_layers, vllm_config,
                     worker_connector)
from kvstrata_vllm import KVStrataConnector
from test_scheduler import PROMPT, drain_stores, ext, run_and_verify


def pp_engine(make, model_dir, daemon, tp: int = 1, **kw) -> Engine:
    return make(model_dir, ext(daemon), pp=2, tp=tp, **kw)


def drop_stores(engine: Engine, rank: int) -> None:
    """The worker of this rank (stage * tp + tensor-parallel rank) stores nothing."""
    side = engine.workers[rank].connector.worker
    side.io.save = lambda stores: None


def stored(make, model_dir, daemon, prompt, tp: int = 1, dropping: tuple = (),
           **kw) -> Engine:
    """An engine that ran `prompt` as its request "r1" (checking its KV), the workers of
    `dropping` storing nothing, its stores done."""
    e = pp_engine(make, model_dir, daemon, tp=tp, **kw)
    for rank in dropping:
        drop_stores(e, rank)
    run_and_verify(e, e.add(prompt, max_tokens=4).request_id)
    drain_stores(e)
    return e


def daemon_namespaces(daemon) -> Dict[tuple, tuple]:
    """(pp_rank, tp_rank) -> (pp_size, num_layers, blocks) of every namespace the daemon
    holds."""
    with daemon.client() as c:
        listed = c.list_namespaces().namespaces
    out = {(n.spec.pp_rank, n.spec.tp_rank): (n.spec.pp_size, n.spec.num_layers, n.blocks)
           for n in listed}
    assert len(out) == len(listed)
    return out


@pytest.mark.parametrize("tp", [1, 2])
def test_each_stage_stores_its_own_layers_in_a_namespace_of_its_own(model_dir, daemon,
                                                                    engines, tp):
    e = pp_engine(engines, model_dir, daemon, tp=tp)
    fields = e.connector.scheduler.fields
    assert set(fields) == {(0, rank) for rank in range(2 * tp)}
    for (_, rank), f in fields.items():
        assert (f["pp_size"], f["pp_rank"], f["tp_size"], f["tp_rank"], f["num_layers"]) == \
            (2, rank // tp, tp, rank % tp, 1)
        # The worker of that rank registers the very namespace the scheduler looks up.
        assert e.workers[rank].connector.worker.fields[0] == f
    link = e.connector.scheduler.link
    assert len({link.namespaces[k].fingerprint for k in fields}) == 2 * tp
    e.step()  # the workers' sessions register on first use
    run_and_verify(e, e.add(PROMPT, max_tokens=4).request_id)
    drain_stores(e)
    assert e.stats["stored_units"] == 6 * 2 * tp
    assert daemon_namespaces(daemon) == {(p, t): (2, 1, 6) for p in range(2) for t in range(tp)}


@pytest.mark.parametrize("tp", [1, 2])
def test_a_unit_every_stage_holds_is_a_hit_with_exact_kv(model_dir, daemon, engines, tp):
    a = stored(engines, model_dir, daemon, PROMPT, tp=tp)
    b = pp_engine(engines, model_dir, daemon, tp=tp)
    req = b.add(PROMPT, max_tokens=4)
    b.step()
    assert b.scheduler.requests[req.request_id].num_computed_tokens >= 96
    run_and_verify(b, req.request_id)    # every stage's, every rank's KV, byte for byte
    assert b.stats["hit_tokens"] == 6 * BLOCK and b.stats["loaded_units"] == 6 * 2 * tp
    assert b.outputs[req.request_id] == a.outputs["r1"]
    assert not b.invalid_reported


@pytest.mark.parametrize("tp, missing", [(1, 0), (1, 1), (2, 3)],
                         ids=["stage0", "stage1", "stage1-tp1"])
def test_a_unit_one_stage_lacks_is_a_miss(model_dir, daemon, engines, tp, missing):
    a = stored(engines, model_dir, daemon, PROMPT, tp=tp, dropping=(missing,))
    assert a.stats["stored_units"] == 6 * (2 * tp - 1)
    b = pp_engine(engines, model_dir, daemon, tp=tp)
    req = b.add(PROMPT, max_tokens=4)
    run_and_verify(b, req.request_id)
    assert b.stats.get("hit_tokens", 0) == 0 and b.stats.get("loaded_units", 0) == 0
    assert b.outputs[req.request_id] == a.outputs["r1"]


def test_the_hit_ends_where_one_stage_s_units_end(model_dir, daemon, engines):
    """Stage 0 holds the prompt's 6 units, stage 1 only the first 4: a 64-token hit."""
    stored(engines, model_dir, daemon, PROMPT[:64])
    stored(engines, model_dir, daemon, PROMPT, dropping=(1,))
    assert daemon_namespaces(daemon) == {(0, 0): (2, 1, 6), (1, 0): (2, 1, 4)}
    c = pp_engine(engines, model_dir, daemon)
    req = c.add(PROMPT, max_tokens=4)
    run_and_verify(c, req.request_id)
    assert c.stats["hit_tokens"] == 64 and c.stats["loaded_units"] == 2 * 4


def test_loads_go_to_each_stage_s_namespace_with_its_lease(model_dir, daemon, engines):
    """PP=2 x TP=2: each worker loads from its own (stage, rank) namespace and consumes the
    lease the scheduler's lookup took on that namespace."""
    stored(engines, model_dir, daemon, PROMPT, tp=2)
    b = pp_engine(engines, model_dir, daemon, tp=2)
    used: Dict[int, set] = {}
    leases: Dict[int, List[int]] = {}
    for rank, w in enumerate(b.workers):
        book = w.connector.worker.book

        def session_and_ns(group=0, rank=rank, real=book.session_and_ns):
            s, ns = real(group)
            used.setdefault(rank, set()).add(ns.fingerprint)
            return s, ns

        def take_lease(req, rank=rank, real=book.take_lease):
            leases.setdefault(rank, []).append(real(req))
            return leases[rank][-1]

        book.session_and_ns, book.take_lease = session_and_ns, take_lease
    sched = b.connector.scheduler
    looked_up: Dict[tuple, int] = {}   # (group, rank) -> the lookup's lease on its namespace

    def hand_leases(st, transfers, real=sched._hand_leases):
        looked_up.update(st.leases)
        real(st, transfers)

    sched._hand_leases = hand_leases
    req = b.add(PROMPT, max_tokens=4)
    run_and_verify(b, req.request_id)
    assert used == {rank: {sched.link.namespaces[(0, rank)].fingerprint} for rank in range(4)}
    assert sorted(looked_up) == [(0, rank) for rank in range(4)] and all(looked_up.values())
    assert leases == {rank: [looked_up[(0, rank)]] for rank in range(4)}
    assert b.stats["loaded_units"] == 4 * 6


def test_mla_each_stage_stores_its_latent_once(model_dir, daemon, engines):
    """MLA at PP=2 x TP=2: one namespace per stage (tp_rank 0), stored by the stage's rank 0
    and loaded by both of its ranks."""
    a = stored(engines, model_dir, daemon, PROMPT, tp=2, mla=True)
    assert set(a.connector.scheduler.fields) == {(0, 0), (0, 2)}
    assert daemon_namespaces(daemon) == {(0, 0): (2, 1, 6), (1, 0): (2, 1, 6)}
    b = pp_engine(engines, model_dir, daemon, tp=2, mla=True)
    req = b.add(PROMPT, max_tokens=4)
    run_and_verify(b, req.request_id)
    assert b.stats["hit_tokens"] == 6 * BLOCK and b.stats["loaded_units"] == 4 * 6
    assert b.outputs[req.request_id] == a.outputs["r1"]


# ---------------------------------------------------------------------- refusals


def _refused(make) -> str:
    with pytest.raises(ValueError) as err:
        make().shutdown()
    msg = str(err.value)
    assert "\n" not in msg
    return msg


def test_a_stage_whose_layers_do_not_match_is_refused(model_dir, daemon):
    """A stage's KV cache holding other layers than vLLM's split gives it (here: both
    layers) would register a namespace the scheduler never looks up: refused at start-up,
    by the worker of that stage and by the scheduler for stage 0."""
    config = vllm_config(model_dir, ext(daemon), pp=2)
    both = kv_cache_config(64)
    msg = _refused(lambda: worker_connector(config, both, rank=0, stage=1))
    assert "pipeline stage 1 of 2" in msg and "holds 2 layers" in msg and "[1, 1]" in msg
    msg = _refused(lambda: KVStrataConnector(config, KVConnectorRole.SCHEDULER, both))
    assert "pipeline stage 0 of 2" in msg


def test_several_kv_cache_groups_under_pipeline_parallelism_are_refused(model_dir, daemon):
    config = vllm_config(model_dir, ext(daemon), pp=2)
    hybrid = kv_cache_config(64, window=32)
    msg = _refused(lambda: KVStrataConnector(config, KVConnectorRole.SCHEDULER, hybrid))
    assert "one KV cache group" in msg and "--disable-hybrid-kv-cache-manager" in msg


def test_a_worker_that_cannot_tell_its_stage_is_refused(model_dir, daemon):
    """Outside vLLM's parallel groups (not initialised here) a worker cannot tell its
    stage: with pipeline_parallel_size 2 it refuses instead of guessing stage 0."""
    config = vllm_config(model_dir, ext(daemon), pp=2)
    msg = _refused(lambda: KVStrataConnector(config, KVConnectorRole.WORKER,
                                             kv_cache_config(64, layers=range(1))))
    assert "cannot tell its pipeline stage" in msg


# ---------------------------------------------------------------------- vLLM's own groups


def _worker_in_vllm_groups(config: Any, world: int, rank: int, port: int, out: Any) -> None:
    """A forked process: rank `rank` of vLLM's real parallel groups (gloo, PP=2 x TP=2) and
    the connector's worker in it, which learns its stage and rank from vLLM itself."""
    try:
        from vllm.config import set_current_vllm_config
        from vllm.distributed import parallel_state

        with set_current_vllm_config(config):
            parallel_state.init_distributed_environment(
                world_size=world, rank=rank, local_rank=rank, backend="gloo",
                distributed_init_method=f"tcp://127.0.0.1:{port}")
            parallel_state.initialize_model_parallel(tensor_model_parallel_size=2,
                                                     pipeline_model_parallel_size=2)
            stage = parallel_state.get_pp_group().rank_in_group
            c = KVStrataConnector(config, KVConnectorRole.WORKER,
                                  kv_cache_config(64, layers=stage_layers(2, stage)))
            side = c.worker
            f = side.fields[0]
            out.put((rank, (side.pp_rank, side.tp_rank, side.rank, f["pp_rank"], f["tp_rank"],
                            f["num_layers"])))
            c.shutdown()
            parallel_state.destroy_model_parallel()
            parallel_state.destroy_distributed_environment()
    except BaseException:  # noqa: BLE001 - reported to the test
        out.put((rank, traceback.format_exc()))


def test_workers_learn_their_stage_from_vllm_s_parallel_groups(model_dir, daemon):
    """Four processes in vLLM's real parallel groups (init_distributed_environment,
    initialize_model_parallel over gloo): each worker's stage and rank come from
    get_pp_group() / the TP group, in vLLM's order (global rank = stage * tp + tp rank)."""
    config = vllm_config(model_dir, ext(daemon), tp=2, pp=2)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    procs = [ctx.Process(target=_worker_in_vllm_groups, args=(config, 4, r, port, out))
             for r in range(4)]
    for p in procs:
        p.start()
    try:
        got = dict(out.get(timeout=180) for _ in procs)
    finally:
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
    for rank in range(4):
        assert got[rank] == (rank // 2, rank % 2, rank, rank // 2, rank % 2, 1), got[rank]
