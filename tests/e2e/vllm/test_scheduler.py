"""KVStrataConnector inside vLLM's real Scheduler (CPU, no GPU) against a real kvstratad.

Each test runs harness.Engine: vLLM's Scheduler (0.33, and 0.26 in a second run of the same
tests: scripts/test.sh) with the connector in the scheduler
role and 1-2 worker-role connectors holding real CPU KV cache tensors (host mode, shared
memory). "A restarted vLLM" is a new Engine with zeroed KV tensors: whatever KV it holds
for a cached prefix came through KVStrata, and is checked byte for byte.
"""
from __future__ import annotations

import time
from typing import List

import pytest


from harness import BLOCK, Engine, finished
from kvstrata_vllm.metadata import KVStrataMetadata

PROMPT = [100 + (i * 7) % 300 for i in range(100)]    # 6 full blocks + 4 tokens


def ext(daemon, **extra) -> dict:
    return {"endpoint": daemon.endpoint, **extra}


def verify(engine: Engine, req_id: str) -> None:
    """Every computed position of a running request holds the KV its tokens produce."""
    req = engine.scheduler.requests[req_id]
    for w in engine.workers:
        bad = w.check(engine.block_ids(req_id), req.all_token_ids, req.num_computed_tokens)
        assert not bad, f"rank {w.rank}: wrong KV at positions {bad[:8]}..."


def run_and_verify(engine: Engine, req_id: str) -> None:
    """Step until the request finishes, checking its KV whenever it is running."""
    for _ in range(200):
        if req_id in engine.finished:
            return
        engine.step()
        if req_id in engine.scheduler.requests and \
                engine.scheduler.requests[req_id].num_computed_tokens > 0 and \
                engine.scheduler.requests[req_id] in engine.scheduler.running:
            verify(engine, req_id)
    raise AssertionError(f"{req_id} did not finish")


def run_two_growing_requests(engine: Engine, check: bool = False) -> tuple:
    """PROMPT and PROMPT reversed, 60 tokens each, run to the end on an engine with too few
    blocks for both: vLLM preempts one at least once (asserted). check: verify the KV of
    every running request after each step."""
    a = engine.add(PROMPT, max_tokens=60)
    b = engine.add(PROMPT[::-1], max_tokens=60)
    preempted = 0
    for _ in range(400):
        if not engine.scheduler.has_requests():
            break
        so = engine.step()
        preempted += len(so.preempted_req_ids or ())
        for req in list(engine.scheduler.running) if check else ():
            verify(engine, req.request_id)
    assert preempted >= 1
    return a, b


def hit_sources(engine: Engine, req) -> "dict | None":
    """The connector's external hit split by tier ({"HOST": n, "DISK": m}); None on a vLLM
    without hit sources (0.26: vllm.v1.metrics.cache_hit_source does not exist)."""
    from kvstrata_vllm import connector

    if connector.CacheHitSource is None:
        return None
    split = engine.connector.get_external_cache_hit_sources(req, 6 * BLOCK)
    return {source.name: n for source, n in split.items()}


def slow_compute(engine: Engine, ms_per_token: float = 0.1) -> None:
    """The planner sees an engine that computes a token in ms_per_token (a tiny CPU model
    computes faster than any load: the planner would rightly recompute every hit)."""
    engine.connector.scheduler.planner.prefill.predict_ms = \
        lambda tokens, context: max(1, tokens) * ms_per_token


def in_step_hit_with_the_planner(make, model_dir, daemon) -> Engine:
    """A fresh engine with the planner on (load_mode sync, a slow compute) whose request for
    PROMPT, which KVStrata holds, loads its 6 units in the step; the engine."""
    e = make(model_dir, ext(daemon, load_mode="sync", load_planner="on"))
    slow_compute(e)
    r = e.add(PROMPT)
    run_and_verify(e, r.request_id)
    assert e.stats.get("plan_in_step") == 1 and e.stats.get("loaded_units") == 6, e.stats
    return e


def drain_stores(engine: Engine) -> None:
    engine.drain_stores()


def warm(make, model_dir, daemon, prompt=PROMPT, tp=1, **extra) -> List[int]:
    """Run `prompt` once on a fresh engine so KVStrata holds its units; its output."""
    e = make(model_dir, ext(daemon, **extra), tp=tp)
    r = e.add(prompt)
    e.run()
    drain_stores(e)
    assert e.stats.get("stored_units", 0) > 0, e.stats
    return e.outputs[r.request_id]


def test_second_engine_gets_external_hits_and_exact_kv(model_dir, daemon, engines):
    first = warm(engines, model_dir, daemon)
    e = engines(model_dir, ext(daemon))
    r = e.add(PROMPT)
    so = e.step()   # The lookup: an async load of the 6 stored blocks, nothing scheduled.
    assert r.status.name == "WAITING_FOR_REMOTE_KVS" or e.stats.get("loaded_units")
    assert hit_sources(e, r) in (None, {"HOST": 6 * BLOCK})    # all from L1
    run_and_verify(e, r.request_id)
    assert e.outputs[r.request_id] == first
    assert e.stats["hit_tokens"] == 6 * BLOCK          # all full blocks but none of the tail
    assert e.stats["loaded_units"] == 6
    assert not e.invalid_reported
    assert e.scheduler.kv_cache_manager.block_pool.get_num_free_blocks() > 0
    del so


@pytest.mark.parametrize("fast_lookup", [True, False])
def test_lookups_use_the_fast_path_unless_turned_off(model_dir, daemon, engines, fast_lookup):
    """The scheduler's lookups go over the daemon's lookup fast path (kvstrata.DaemonLink,
    fast_lookup, default on), as SGLang's batch_exists does; fast_lookup=False: gRPC."""
    first = warm(engines, model_dir, daemon)
    e = engines(model_dir, ext(daemon, fast_lookup=fast_lookup))
    r = e.add(PROMPT)
    run_and_verify(e, r.request_id)
    assert e.outputs[r.request_id] == first
    assert e.stats["hit_tokens"] == 6 * BLOCK
    assert (e.stats.get("lookup_fast", 0) > 0) == fast_lookup, e.stats


def test_local_hit_then_external_hit_beyond_it(model_dir, daemon, engines):
    """vLLM's own prefix cache covers 2 blocks; KVStrata supplies the next 4."""
    warm(engines, model_dir, daemon)
    e = engines(model_dir, ext(daemon))
    short = e.add(PROMPT[:40])       # computes (and caches locally) blocks 0-1
    e.run()
    loaded_before = e.stats.get("loaded_units", 0)
    r = e.add(PROMPT)
    run_and_verify(e, r.request_id)
    assert e.stats.get("loaded_units", 0) - loaded_before == 4
    del short


def lookup_blocks(daemon) -> float:
    """Keys the daemon has been asked in lookups (its kvstrata_lookup_blocks_total)."""
    from prom_text import scrape

    with daemon.client(timeout=10.0) as c:
        return scrape(c.get_status().metrics_address).value("kvstrata_lookup_blocks_total")


def test_a_later_turn_asks_for_its_new_units_only(model_dir, daemon, engines):
    """A request whose first units vLLM holds (a conversation's next turn) is looked up from
    the last of them, not from unit 0: 2 + 1 keys for a 9-unit prompt 6 of whose units
    vLLM holds, where it asked 9. Against a daemon that lacks that unit (restarted, empty),
    it asks from unit 0 again and stores the units vLLM holds as well."""
    e = engines(model_dir, ext(daemon))
    e.add(PROMPT)
    e.run()
    e.drain_stores()
    longer = PROMPT + [7 + i for i in range(50)]          # 150 tokens: 9 full units
    before = lookup_blocks(daemon)
    r = e.add(longer)
    run_and_verify(e, r.request_id)
    assert lookup_blocks(daemon) - before == 3 + 1   # units 5..8, then the next turn's
    e.drain_stores()
    assert e.stats.get("stored_units") == 6 + 3, e.stats


def test_a_later_turn_against_an_empty_daemon_stores_the_whole_prefix(model_dir, workdir,
                                                                       engines):
    from kvs_testing import Daemon

    d = Daemon(workdir).start()
    try:
        e = engines(model_dir, {"endpoint": d.endpoint, "reconnect_interval_s": 0.1})
        e.add(PROMPT)
        e.run()
        e.drain_stores()
        d.stop()
        d = Daemon(workdir).start()                       # empty: holds none of them
        # Requests until the scheduler and the workers reconnected (each on its first
        # failing call) and a store went through, then the next turn of the conversation.
        deadline = time.monotonic() + 30
        while e.stats.get("stored_units", 0) <= 6 and time.monotonic() < deadline:
            e.add([300 + (int(time.monotonic() * 1e3) + i) % 900 for i in range(40)])
            e.run()
            e.drain_stores()
            time.sleep(0.2)
        stored = e.stats.get("stored_units", 0)
        assert stored > 6, "the workers never stored into the restarted daemon"
        before = lookup_blocks(d)
        r = e.add(PROMPT + [7 + i for i in range(50)])
        run_and_verify(e, r.request_id)
        e.drain_stores()
        assert lookup_blocks(d) - before == 4 + 9, "unit 5 (absent), then from unit 0"
        assert e.stats.get("stored_units") - stored == 9, e.stats
    finally:
        d.stop() if d.running() else d.kill()


def test_a_waiting_request_is_looked_up_once(model_dir, daemon, engines):
    """vLLM asks again every step for a request it cannot schedule yet (no free blocks):
    the connector answers from its lookup (lease held) instead of asking the daemon each
    time, and the request still loads its hit, byte-exact."""
    first = warm(engines, model_dir, daemon, prompt=PROMPT[::-1])
    e = engines(model_dir, ext(daemon), num_blocks=12)
    a = e.add([5 + i % 200 for i in range(100)], max_tokens=60)   # holds most blocks
    e.step()
    before = lookup_blocks(daemon)
    b = e.add(PROMPT[::-1])
    for _ in range(400):
        if b.request_id in e.finished:
            break
        e.step()
    assert b.request_id in e.finished and a.request_id in e.finished
    assert e.stats.get("lookup_reused", 0) >= 2, e.stats
    assert lookup_blocks(daemon) - before <= 2 * 7, "looked up at most twice"
    assert e.stats.get("loaded_units") == 6 and not e.invalid_reported
    assert e.outputs[b.request_id] == first


def test_tokens_per_unit_multiple_of_block(model_dir, daemon, engines):
    """Units of 32 tokens (2 blocks): 3 full units of the 100-token prompt."""
    first = warm(engines, model_dir, daemon, tokens_per_unit=32)
    e = engines(model_dir, ext(daemon, tokens_per_unit=32))
    r = e.add(PROMPT)
    run_and_verify(e, r.request_id)
    assert e.stats["hit_tokens"] == 96 and e.stats["loaded_units"] == 3
    assert e.outputs[r.request_id] == first


def test_chunked_prefill_stores_only_after_the_forward_pass(model_dir, daemon, engines):
    """64-token steps: a unit is handed to the workers only in the step that computes it,
    and the workers gather it in wait_for_save, after the (fake) forward wrote it."""
    e = engines(model_dir, ext(daemon))
    r = e.add(PROMPT)
    so = e.step()
    stores = so.kv_connector_metadata.stores
    assert [len(t.units) for t in stores] == [4]         # tokens 0..63 computed this step
    so = e.step()
    assert [len(t.units) for t in so.kv_connector_metadata.stores] == [2]
    e.run()
    drain_stores(e)
    assert e.stats["stored_units"] == 6
    del r


def test_offload_all_stores_decode_blocks(model_dir, daemon, engines):
    e = engines(model_dir, ext(daemon, offload="all"))
    r = e.add(PROMPT[:30], max_tokens=40)     # 70 tokens in all: 4 full blocks
    e.run()
    drain_stores(e)
    assert e.stats["stored_units"] == 4
    e2 = engines(model_dir, ext(daemon))
    r2 = e2.add(PROMPT[:30] + e.outputs[r.request_id][:35])
    run_and_verify(e2, r2.request_id)
    assert e2.stats["loaded_units"] == 4


def test_prompt_only_default_and_max_offload_tokens(model_dir, daemon, engines):
    e = engines(model_dir, ext(daemon))
    e.add(PROMPT[:30], max_tokens=40)                      # 1 prompt block
    e.add(PROMPT[50:] + PROMPT, params={"max_offload_tokens": 40})   # capped: 2 blocks
    e.add(PROMPT[60:] + PROMPT, params={"max_offload_tokens": "lots"})   # bad: not stored
    e.run()
    drain_stores(e)
    assert e.stats["stored_units"] == 3
    assert len(e.finished) == 3


def test_store_threshold_tokens(model_dir, daemon, engines):
    e = engines(model_dir, ext(daemon, store_threshold_tokens=64))
    e.add(PROMPT[:40])       # below the threshold: not stored
    e.add(PROMPT)            # stored
    e.run()
    drain_stores(e)
    assert e.stats["stored_units"] == 6


def test_store_backpressure_drops_never_blocks(model_dir, daemon, engines):
    """A store queue of 3 units' bytes: a 6-unit step is dropped whole (counted), the
    request completes, and later steps store again."""
    unit_bytes = 2 * 2 * BLOCK * 2 * 4 * 4        # layers * K/V * tokens * heads * dim * f32
    e = engines(model_dir, ext(daemon, max_pending_store_bytes=3 * unit_bytes),
                batch_tokens=256)
    e.add(PROMPT)                                  # one step computes all 6 units
    e.run()
    e.drain_stores()
    assert e.stats.get("store_dropped_units") == 6 and not e.stats.get("stored_units")
    e.add(PROMPT[::-1][:40])                       # 2 units: fit
    e.run()
    e.drain_stores()
    assert e.stats.get("stored_units") == 2
    assert len(e.finished) == 2


def test_cache_salt_isolates(model_dir, daemon, engines):
    e = engines(model_dir, ext(daemon))
    e.add(PROMPT, salt="tenant-a")
    e.run()
    drain_stores(e)
    e2 = engines(model_dir, ext(daemon))
    other = e2.add(PROMPT, salt="tenant-b")
    none = e2.add(PROMPT)
    e2.run()
    assert e2.stats.get("hit_tokens", 0) == 0
    same = e2.add(PROMPT, salt="tenant-a")
    run_and_verify(e2, same.request_id)
    assert e2.stats["hit_tokens"] == 6 * BLOCK
    del other, none


def test_namespace_model_override_isolates(model_dir, daemon, engines):
    warm(engines, model_dir, daemon)
    e = engines(model_dir, ext(daemon, namespace={"model": "another-name"}))
    e.add(PROMPT)
    e.run()
    assert e.stats.get("hit_tokens", 0) == 0


@pytest.mark.parametrize("load_mode", ["auto", "sync"])
def test_load_errors_are_recomputed(model_dir, daemon, engines, load_mode):
    """Units evicted between the lookup and the load: their blocks are reported invalid and
    vLLM recomputes them (kv_load_failure_policy=recompute); the request completes with
    correct KV and output. Asynchronous loads (auto, on a CPU engine) and same-step loads
    (sync: the failed blocks come back in the very step, vLLM discards its output for the
    request and recomputes from the first bad block) alike."""
    first = warm(engines, model_dir, daemon)
    e = engines(model_dir, ext(daemon, load_mode=load_mode))
    r = e.add(PROMPT)
    w = e.workers[0].connector.worker
    real = w.io.load

    def lose_units(req):   # The daemon answers a miss for units 3..5 (as after an eviction).
        assert req.sync == (load_mode == "sync")
        req.units = req.units[:3] + [type(u)(b"\x00" * 32, u.block_ids) for u in req.units[3:]]
        real(req)

    w.io.load = lose_units
    run_and_verify(e, r.request_id)
    assert len(e.invalid_reported) == 3
    assert e.stats["load_failed_units"] == 3 and e.stats["loaded_units"] == 3
    assert e.outputs[r.request_id] == first


def test_planner_times_loads_and_forgets_failed_ones(model_dir, daemon, engines):
    """load_planner=on: a load that lands is a sample of its tier (the daemon's time); an
    in-step load that fails sends no time and is over with its step's output -- never left
    in flight to be counted as ever slower while its request decodes."""
    from kvstrata import Tier

    warm(engines, model_dir, daemon)
    warm(engines, model_dir, daemon, prompt=PROMPT[::-1])
    e = in_step_hit_with_the_planner(engines, model_dir, daemon)
    sched = e.connector.scheduler
    l1 = sched.planner.tiers._samples[int(Tier.L1)]
    assert len(l1) == 1 and l1[0].nbytes == 6 * sched.plans.unit_bytes()
    w = e.workers[0].connector.worker
    real = w.io.load

    def lose_units(req):   # the daemon answers a miss for every unit: no time is sent
        req.units = [type(u)(b"\x00" * 32, u.block_ids) for u in req.units]
        real(req)

    w.io.load = lose_units
    r2 = e.add(PROMPT[::-1], max_tokens=40)
    run_and_verify(e, r2.request_id)
    assert e.invalid_reported and not sched.plans.inflight
    assert len(sched.planner.tiers._samples[int(Tier.L1)]) == 1
    assert sched.planner._queued.get(int(Tier.L1), 0) == 0


def test_same_step_load_runs_the_request_at_once(model_dir, daemon, engines):
    """load_mode=sync: an L1 hit is loaded in the step that schedules the request (vLLM's
    load_async=False): the request never waits for remote KVs, its KV is exact, the output is
    the same, and the lookup's lease is released by the next step."""
    from vllm.v1.request import RequestStatus

    first = warm(engines, model_dir, daemon)
    e = engines(model_dir, ext(daemon, load_mode="sync"))
    r = e.add(PROMPT)
    so = e.step()
    assert r.status == RequestStatus.RUNNING
    assert [n.req_id for n in so.scheduled_new_reqs] == [r.request_id]
    assert so.scheduled_new_reqs[0].num_computed_tokens == 6 * BLOCK   # the hit, this step
    verify(e, r.request_id)
    assert e.stats.get("loaded_units") == 6 and not e.invalid_reported
    e.step()
    assert not e.connector.scheduler._reqs[r.request_id].leases
    run_and_verify(e, r.request_id)
    assert e.outputs[r.request_id] == first


def test_auto_load_mode_keeps_cpu_engines_asynchronous(model_dir, daemon, engines):
    """load_mode=auto (the default) loads asynchronously on a CPU engine (same-step loads
    are for GPU engines), and so does sync for units that are not in L1."""
    from vllm.v1.request import RequestStatus

    warm(engines, model_dir, daemon)
    e = engines(model_dir, ext(daemon))
    r = e.add(PROMPT)
    e.step()
    assert r.status == RequestStatus.WAITING_FOR_REMOTE_KVS or e.stats.get("loaded_units")
    assert e.connector.scheduler._in_step_allowed() is False
    s = engines(model_dir, ext(daemon, load_mode="sync")).connector.scheduler
    assert s._in_step_allowed() is True
    assert s.planner is None   # load_planner=auto: off on CPU engines (every hit loads)


def test_abort_mid_load(model_dir, daemon, engines):
    """A request aborted while waiting for its load: blocks freed, leases released, the
    engine keeps serving the next request."""
    from vllm.v1.request import RequestStatus

    warm(engines, model_dir, daemon)
    e = engines(model_dir, ext(daemon))
    r = e.add(PROMPT)
    free_before = e.scheduler.kv_cache_manager.block_pool.get_num_free_blocks()

    def abort(so):
        assert r.status == RequestStatus.WAITING_FOR_REMOTE_KVS
        e.scheduler.finish_requests(r.request_id, RequestStatus.FINISHED_ABORTED)

    e.step(before_update=abort)
    e.run()
    assert r.request_id not in e.scheduler.requests
    assert e.scheduler.kv_cache_manager.block_pool.get_num_free_blocks() == free_before
    assert not e.connector.scheduler._reqs
    r2 = e.add(PROMPT)
    run_and_verify(e, r2.request_id)


def test_preemption_and_resume(model_dir, daemon, engines):
    """Too few blocks for two growing requests: vLLM preempts one; it resumes through
    KVStrata (its stored prompt units) and both complete with correct KV."""
    warm(engines, model_dir, daemon)
    warm(engines, model_dir, daemon, prompt=PROMPT[::-1])
    e = engines(model_dir, ext(daemon), num_blocks=16)
    a, b = run_two_growing_requests(e, check=True)
    assert set(e.finished) == {a.request_id, b.request_id}
    assert e.stats["loaded_units"] > 6   # the resumed request loaded again


def test_tp2_hit_only_when_every_rank_has_it(model_dir, daemon, engines):
    first = warm(engines, model_dir, daemon, tp=2)
    e = engines(model_dir, ext(daemon), tp=2)
    r = e.add(PROMPT)
    run_and_verify(e, r.request_id)      # checks each rank's own KV (values differ by rank)
    assert e.stats["loaded_units"] == 12 and e.stats["hit_tokens"] == 6 * BLOCK
    assert e.outputs[r.request_id] == first


def test_tp2_unit_on_one_rank_only_is_a_miss(model_dir, daemon, engines):
    e = engines(model_dir, ext(daemon), tp=2)
    e.workers[1].connector.worker.disable("the test: rank 1 stores nothing")
    e.add(PROMPT)
    e.run()
    drain_stores(e)
    assert e.stats["stored_units"] == 6            # rank 0 only
    e2 = engines(model_dir, ext(daemon), tp=2)
    r = e2.add(PROMPT)
    run_and_verify(e2, r.request_id)
    assert e2.stats.get("hit_tokens", 0) == 0 and e2.stats.get("loaded_units", 0) == 0


def test_delayed_frees_reach_get_finished_without_a_forward_pass(model_dir, daemon, engines):
    """vLLM skips wait_for_save on a step without a forward pass: the step's delayed frees
    must still be reported finished sending (else the blocks stay allocated forever)."""
    e = engines(model_dir, ext(daemon))
    c = e.workers[0].connector
    c.bind_connector_metadata(KVStrataMetadata(delayed_frees={"gone"}))
    c.start_load_kv(None)                  # no forward pass: no wait_for_save
    sending, _, _ = finished(c, {"gone"})
    c.clear_connector_metadata()
    assert sending == {"gone"}


def test_gpu_engine_frees_blocks_after_stores_even_when_idle(model_dir, daemon, engines):
    """A CUDA-mode scheduler keeps a finished request's blocks until its stores are done;
    the next steps have no forward pass (nothing else runs), and the blocks must come back
    all the same, with the request gone and the prefix cache resettable."""
    e = engines(model_dir, ext(daemon))
    e.connector.scheduler.host_mode = False    # blocks wait for the stores, as on a GPU
    free_before = e.scheduler.kv_cache_manager.block_pool.get_num_free_blocks()
    r = e.add(PROMPT)
    e.run()
    for _ in range(3):
        e.step()
    assert r.request_id not in e.scheduler.requests
    assert e.scheduler.kv_cache_manager.block_pool.get_num_free_blocks() == free_before
    assert e.scheduler.reset_prefix_cache()


def test_stores_after_preemption_use_the_resumed_blocks(model_dir, daemon, engines):
    """Block ids come from SchedulerOutput (no KV cache manager binding): after a preemption
    the resumed request's new blocks replace the old ones, and what it stores from them is
    exact KV (checked by a second engine that loads every stored unit)."""
    e = engines(model_dir, ext(daemon, offload="all"), num_blocks=16)
    a, b = run_two_growing_requests(e)
    drain_stores(e)
    for req, prompt in ((a, PROMPT), (b, PROMPT[::-1])):
        seq = prompt + e.outputs[req.request_id]
        e2 = engines(model_dir, ext(daemon))
        r2 = e2.add(seq[:(len(seq) - 1) // BLOCK * BLOCK + 1])
        run_and_verify(e2, r2.request_id)
        assert e2.stats["hit_tokens"] == (len(seq) - 1) // BLOCK * BLOCK


def test_a_failed_load_is_not_retried(model_dir, daemon, engines):
    """A load that fails whole (here: the worker cannot reach the daemon, as while it
    reconnects after a restart) is recomputed once; the scheduler does not offer the same
    hit again (vLLM asks again after the failure), so no load is retried every step."""
    warm(engines, model_dir, daemon)
    e = engines(model_dir, ext(daemon))
    w = e.workers[0].connector.worker
    attempts = []

    def unreachable(req):
        attempts.append(req.req_id)
        w.book.fail_load(req, list(range(len(req.units))))

    w.io.load = unreachable
    r = e.add(PROMPT)
    run_and_verify(e, r.request_id)
    assert len(attempts) == 1
    assert e.stats["load_failed_units"] == 6 and not e.stats.get("loaded_units")
