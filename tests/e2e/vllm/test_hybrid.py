"""Hybrid models (vLLM's hybrid KV cache manager, SupportsHMA) in vLLM's real Scheduler.

harness.Engine(window=W) lays a model out as vLLM does for gpt-oss: group 0 full attention,
group 1 a sliding window of W tokens, the two groups' layers sharing tensors. Each group is
a namespace of its own; a unit is a hit when every full-attention group holds the prefix and
every sliding-window group the units its window reads after the hit. Loaded KV is checked
byte for byte: every position of the full-attention layers, the window's positions of the
sliding-window layers.
"""
from __future__ import annotations

import pytest
import torch
from vllm.v1.kv_cache_interface import (ChunkedLocalAttentionSpec, FullAttentionSpec,
                                        KVCacheConfig, KVCacheGroupSpec, MambaSpec,
                                        SlidingWindowSpec)

from vllm.v1.request import RequestStatus

from harness import BLOCK, HEAD, KV_HEADS, Engine
from kvstrata_vllm.namespace import kv_groups
from test_scheduler import PROMPT, drain_stores, ext, run_and_verify
from test_step_cost import count_calls

WINDOW = 32   # tokens: two blocks


def hybrid(make, model_dir, daemon, **kw) -> Engine:
    return make(model_dir, ext(daemon), window=WINDOW, **kw)


def stored(make, model_dir, daemon, prompt, full_only: bool = False, **kw) -> Engine:
    """An engine that ran `prompt` as its request "r1" (checking its KV) and whose stores
    are done; with full_only its sliding-window group stored nothing."""
    e = hybrid(make, model_dir, daemon, **kw)
    if full_only:
        store_full_attention_only(e)
    run_and_verify(e, e.add(prompt, max_tokens=4).request_id)
    drain_stores(e)
    return e


def first_step(e: Engine, prompt) -> "tuple":
    """Add the prompt, run one step: (the request's id, vLLM's Request)."""
    req = e.add(prompt, max_tokens=4)
    e.step()
    return req.request_id, e.scheduler.requests[req.request_id]


def store_full_attention_only(engine: Engine) -> None:
    """The engine's workers drop their sliding-window group's stores."""
    for w in engine.workers:
        side = w.connector.worker
        save = side.io.save
        side.io.save = lambda stores, save=save: save([r for r in stores if r.group == 0])


def test_each_group_is_a_namespace_of_its_own(model_dir, daemon, engines):
    e = hybrid(engines, model_dir, daemon)
    link = e.connector.scheduler.link
    full, window = link.namespaces[(0, 0)], link.namespaces[(1, 0)]
    assert full.fingerprint != window.fingerprint
    fields = e.connector.scheduler.fields
    assert fields[(0, 0)]["kv_group"] == "0/2:full"
    assert fields[(1, 0)]["kv_group"] == f"1/2:sliding_window={WINDOW}"


def test_second_engine_hits_both_groups_with_exact_kv(model_dir, daemon, engines):
    a = hybrid(engines, model_dir, daemon)
    first = a.add(PROMPT, max_tokens=8)
    run_and_verify(a, first.request_id)
    drain_stores(a)
    assert a.stats.get("stored_units", 0) > 0
    b = hybrid(engines, model_dir, daemon)
    req = b.add(PROMPT, max_tokens=8)
    b.step()
    # The whole prompt's units but the partial last one: 96 of 100 tokens from KVStrata.
    assert b.scheduler.requests[req.request_id].num_computed_tokens >= 96
    run_and_verify(b, req.request_id)
    assert b.outputs[req.request_id] == a.outputs[first.request_id]
    assert not b.invalid_reported


def test_a_missing_window_unit_ends_the_hit_before_it(model_dir, daemon, engines):
    """The full-attention group holds 6 units, the sliding-window group only the first 4:
    the window after 96 tokens (units 4-5) is missing, the one after 64 (units 2-3) is
    there, so the hit is 64 tokens."""
    stored(engines, model_dir, daemon, PROMPT[:64])
    stored(engines, model_dir, daemon, PROMPT, full_only=True)
    b = hybrid(engines, model_dir, daemon)
    req_id, r = first_step(b, PROMPT)
    # A hybrid model's load is asynchronous: the request waits for its 64 tokens.
    assert r.status == RequestStatus.WAITING_FOR_REMOTE_KVS and r.num_computed_tokens == 64
    run_and_verify(b, req_id)
    assert not b.invalid_reported and not b.failed_reported


def test_no_window_units_means_no_hit(model_dir, daemon, engines):
    stored(engines, model_dir, daemon, PROMPT, full_only=True)
    b = hybrid(engines, model_dir, daemon)
    req_id, r = first_step(b, PROMPT)
    assert r.status == RequestStatus.RUNNING and r.num_computed_tokens == 64  # one chunk
    run_and_verify(b, req_id)


def test_tp2_hybrid_hit_on_every_rank(model_dir, daemon, engines):
    a = hybrid(engines, model_dir, daemon, tp=2)
    first = a.add(PROMPT, max_tokens=4)
    run_and_verify(a, first.request_id)
    drain_stores(a)
    b = hybrid(engines, model_dir, daemon, tp=2)
    req = b.add(PROMPT, max_tokens=4)
    b.step()
    assert b.scheduler.requests[req.request_id].num_computed_tokens >= 96
    run_and_verify(b, req.request_id)
    assert b.outputs[req.request_id] == a.outputs[first.request_id]


def _config(*specs) -> KVCacheConfig:
    return KVCacheConfig(num_blocks=16, kv_cache_tensors=[], kv_cache_groups=[
        KVCacheGroupSpec([f"model.layers.{i}.attn"], spec) for i, spec in enumerate(specs)])


FULL = FullAttentionSpec(block_size=BLOCK, num_kv_heads=KV_HEADS, head_size=HEAD,
                         dtype=torch.float32)


def test_disabled_hybrid_manager_serves_window_layers_as_full_attention():
    """--disable-hybrid-kv-cache-manager: vLLM keeps every block of a sliding-window layer
    (a FullAttentionSpec with sliding_window set): one full-attention group."""
    spec = FullAttentionSpec(block_size=BLOCK, num_kv_heads=KV_HEADS, head_size=HEAD,
                             dtype=torch.float32, sliding_window=128)
    (group,) = kv_groups(_config(spec))
    assert group.sliding_window == 0 and group.label == ""


@pytest.mark.parametrize("spec, says", [
    (MambaSpec(shapes=((4, 4),), dtypes=(torch.float32,), block_size=BLOCK), "MambaSpec"),
    (ChunkedLocalAttentionSpec(block_size=BLOCK, num_kv_heads=KV_HEADS, head_size=HEAD,
                               dtype=torch.float32, attention_chunk_size=64),
     "ChunkedLocalAttentionSpec"),
])
def test_a_group_kind_it_cannot_serve_is_refused_in_one_line(spec, says):
    with pytest.raises(ValueError) as err:
        kv_groups(_config(FULL, spec))
    msg = str(err.value)
    assert "\n" not in msg
    assert "KV cache group 1 of 2" in msg and says in msg and "model.layers.1.attn" in msg
    assert "OffloadingConnector" in msg  # what to do


def test_groups_of_different_block_sizes_are_refused():
    swa = SlidingWindowSpec(block_size=2 * BLOCK, num_kv_heads=KV_HEADS, head_size=HEAD,
                            dtype=torch.float32, sliding_window=64)
    with pytest.raises(ValueError, match="one block size"):
        kv_groups(_config(FULL, swa))


def test_a_failed_load_is_reported_per_request_and_recomputed(model_dir, daemon, engines):
    """A hybrid model's failed load: vLLM >= 0.27 takes it per request (failed_recving) and
    recomputes the request; block ids alone would be refused (they repeat across groups).
    vLLM 0.26 has no such report (docs/vllm-connector.md)."""
    from kvstrata_vllm.connector import KVConnectorTransferResults

    if KVConnectorTransferResults is None:
        pytest.skip("this vLLM has no failed_recving (0.26): its scheduler cannot take a "
                    "hybrid model's failed load")
    a = stored(engines, model_dir, daemon, PROMPT)
    b = hybrid(engines, model_dir, daemon)
    side = b.workers[0].connector.worker
    load = side.io.load
    side.io.load = lambda req: side.book.fail_load(req, list(range(len(req.units)))) \
        if req.group == 1 else load(req)
    req = b.add(PROMPT, max_tokens=4)
    run_and_verify(b, req.request_id)
    assert b.failed_reported == {req.request_id}
    assert not b.invalid_reported
    assert b.outputs[req.request_id] == a.outputs["r1"]


def test_a_failed_load_on_a_vllm_without_failed_receives_is_retried(model_dir, daemon,
                                                                     engines, monkeypatch):
    """vLLM 0.26 cannot take a hybrid model's failed load (its scheduler maps invalid block
    ids through one KV cache group): the worker retries the failed units while the request
    waits, e.g. until its session is back after a daemon restart."""
    import kvstrata_vllm.load_retries as load_retries

    monkeypatch.setattr(load_retries, "LOAD_RETRY_DELAY_S", 0.0)
    a = stored(engines, model_dir, daemon, PROMPT)
    b = hybrid(engines, model_dir, daemon)
    side = b.workers[0].connector.worker
    side.book.retry_failed_loads = True  # what a vLLM without failed receives selects
    load, failures = side.io.load, []

    def flaky(req):
        if req.group == 1 and len(failures) < 2:
            failures.append(req.req_id)
            return side.book.fail_load(req, list(range(len(req.units))))
        return load(req)

    side.io.load = flaky
    req = b.add(PROMPT, max_tokens=4)
    run_and_verify(b, req.request_id)
    assert len(failures) == 2
    assert not b.invalid_reported and not b.failed_reported
    assert b.outputs[req.request_id] == a.outputs["r1"]
    assert not side.book.retries.waiting() and not side.book.retries._attempts


def local_hits(engine: Engine) -> list:
    """The tokens vLLM's own prefix cache held for each request the connector was asked
    about (get_num_new_matched_tokens' num_computed_tokens), in order."""
    side = engine.connector.scheduler
    asked, ask = [], side.get_num_new_matched_tokens

    def spy(request, num_computed_tokens):
        asked.append(num_computed_tokens)
        return ask(request, num_computed_tokens)

    side.get_num_new_matched_tokens = spy
    return asked


def test_a_loaded_prompt_is_vllms_own_prefix_hit_next_time(model_dir, daemon, engines):
    """A prompt of whole blocks, all in KVStrata: the load leaves vLLM's prefix cache able to
    serve the same prompt again (up to its last block, vLLM's longest hit) from the GPU,
    sliding-window group included -- not looked up and loaded again. vLLM's sliding-window
    hit needs the window of blocks before the last one; a load that stopped one token short
    of the prompt's end skipped the first of them (outside the loading request's window)."""
    prompt = PROMPT[:96]   # 6 whole blocks
    a = stored(engines, model_dir, daemon, prompt)
    b = hybrid(engines, model_dir, daemon)
    asked = local_hits(b)
    first = b.add(prompt, max_tokens=4)
    run_and_verify(b, first.request_id)
    loaded = b.stats.get("loaded_units", 0)
    # 5 units of the full-attention group, the window's 2 before the last block.
    assert loaded == 5 + 2, b.stats
    # The last unit, which the hit leaves to the forward pass, is not stored again.
    assert not b.stats.get("store_units_planned"), b.stats
    assert b.outputs[first.request_id] == a.outputs["r1"]
    calls = count_calls(b)
    again = b.add(prompt, max_tokens=4)
    run_and_verify(b, again.request_id)
    assert asked == [0, 80], asked   # 5 of 6 blocks from vLLM's own cache the second time
    assert b.stats.get("loaded_units", 0) == loaded, b.stats   # nothing loaded again
    assert calls["lookup"] == [False] and calls["release_lease"] == []   # nothing to pin
    assert b.outputs[again.request_id] == a.outputs["r1"]
    assert not b.invalid_reported and not b.failed_reported


def test_a_sliding_window_group_loads_only_its_window(model_dir, daemon, engines):
    """A 1,024-token prompt (64 blocks): the hit is the 63 blocks before the last one. The
    full-attention group loads all 63; the sliding-window group only the blocks vLLM
    allocated inside the window before the first computed token (the others are vLLM's null
    block: never read, never loaded) -- the same blocks vLLM's OffloadingConnector loads
    (a group's blocks from its first that is neither null nor cached)."""
    prompt = [100 + (i * 7) % 300 for i in range(1024)]
    a = stored(engines, model_dir, daemon, prompt)
    b = hybrid(engines, model_dir, daemon)
    req = b.add(prompt, max_tokens=4)
    so = b.scheduler.schedule()
    loads = {r.group: [u.block_ids[0] for u in r.units] for r in so.kv_connector_metadata.loads}
    full_ids, window_ids = b.scheduler.kv_cache_manager.get_block_ids(req.request_id)
    assert loads[0] == full_ids[:63]
    in_window = [i for i in window_ids[:63] if i != 0]
    assert loads[1] == in_window and len(in_window) <= WINDOW // BLOCK + 1, (loads[1], window_ids)
    b.update(so, b.execute(so))
    run_and_verify(b, req.request_id)
    assert b.outputs[req.request_id] == a.outputs["r1"]
    assert b.stats.get("loaded_units", 0) == 63 + len(in_window), b.stats
