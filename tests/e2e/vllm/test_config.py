"""Bad kv_connector_extra_config / kv_transfer_params: a clear error (or a logged skip for
per-request input), never a crash in the serving loop. Plus KV events and Prometheus."""
from __future__ import annotations

import time

import pytest

from harness import Engine
from kvstrata_vllm.config import max_offload_tokens, parse_config
from test_scheduler import PROMPT, ext


@pytest.mark.parametrize("extra, words", [
    ({"endpoitn": "/x"}, "unknown option(s) endpoitn"),
    ({"endpoint": ""}, "endpoint must be a non-empty string"),
    ({"endpoint": 5}, "endpoint must be a non-empty string"),
    ({"tokens_per_unit": 0}, "tokens_per_unit must be an integer >= 1"),
    ({"tokens_per_unit": "32"}, "tokens_per_unit must be an integer"),
    ({"offload": "decode"}, "offload must be \"prompt\""),
    ({"store_threshold_tokens": -1}, "store_threshold_tokens must be an integer >= 0"),
    ({"namespace": ["model"]}, "namespace must be an object"),
    ({"namespace": {"num_layers": 3}}, "derived from vLLM's KV cache"),
    ({"namespace": {"colour": "red"}}, "not namespace fields"),
    ({"namespace": {"model": 7}}, "namespace.model must be a string"),
    ({"lease_ttl_ms": 10}, "lease_ttl_ms must be an integer >= 1000"),
    ({"full_hit_max_load_tokens": -1}, "full_hit_max_load_tokens must be an integer >= 0"),
    ({"timeout_s": True}, "timeout_s must be a number"),
    ({"load_mode": "layerwise"}, "load_mode must be one of auto, sync, async"),
])
def test_bad_options_name_the_option(extra, words):
    with pytest.raises(ValueError) as info:
        parse_config(extra)
    assert words in str(info.value)


def test_unit_not_a_multiple_of_the_block_size_fails_at_start(model_dir):
    with pytest.raises(ValueError, match="multiple of vLLM's block size 16"):
        Engine(model_dir, {"tokens_per_unit": 24})


@pytest.mark.parametrize("params, cap", [
    (None, None), ({}, None), ({"max_offload_tokens": None}, None),
    ({"max_offload_tokens": 0}, 0), ({"max_offload_tokens": 64}, 64)])
def test_max_offload_tokens(params, cap):
    assert max_offload_tokens(params) == cap


@pytest.mark.parametrize("bad", [-1, "64", 1.5, True])
def test_bad_max_offload_tokens(bad):
    with pytest.raises(ValueError, match="max_offload_tokens must be an integer >= 0"):
        max_offload_tokens({"max_offload_tokens": bad})


def test_kv_events_for_stored_units(model_dir, daemon, engines):
    """BlockStored events (medium CPU, one per unit) reach vLLM's KV event publisher once
    the workers stored the units."""
    e = engines(model_dir, ext(daemon, tokens_per_unit=32), kv_events=True)
    r = e.add(PROMPT)
    e.run()
    e.drain_stores()
    e.step()   # the stores' report rides on the next step's worker output
    stored = [ev for batch in e.published for ev in batch.events
              if type(ev).__name__ == "BlockStored" and ev.medium == "CPU"]
    assert len(stored) == 3
    assert [len(ev.token_ids) for ev in stored] == [32, 32, 32]
    assert stored[0].token_ids == PROMPT[:32] and stored[0].parent_block_hash is None
    assert stored[1].parent_block_hash == stored[0].block_hashes[0]
    assert stored[2].block_hashes[0] == bytes(r.block_hashes[5])
    assert all(ev.block_size == 32 for ev in stored)
    # vLLM's own events for the (single) group carry group_idx 0; the spec kind classifies it.
    assert all(ev.group_idx == 0 and ev.kv_cache_spec_kind == "full_attention" for ev in stored)


def test_kv_events_follow_units_through_the_daemons_tiers(model_dir, workdir):
    """With the daemon's KV events on, take_events also reports what the daemon does with
    the units this connector announced: BlockStored "STORAGE" (token-less: a tier update for
    the key) when written to L2, and exactly
    one BlockRemoved per (unit, medium) as they leave L1 (eviction) and L2 (clear)."""
    import collections

    import kvstrata
    from kvs_testing import Daemon, run_daemon

    settings = {"events.enabled": "true", "events.endpoint": "", "l2.enabled": "true",
                "l2.path": str(workdir / "l2")}
    for d in run_daemon(Daemon(workdir, settings)):
        e = Engine(model_dir, ext(d, tokens_per_unit=32), kv_events=True)

        def ours(kind):
            return [(ev.block_hashes[0], ev.medium) for b in e.published for ev in b.events
                    if type(ev).__name__ == kind and ev.medium in ("CPU", "STORAGE")]

        def step_until(pred):
            for _ in range(100):  # the daemon publishes its notices every 10 ms
                e.step()
                if pred():
                    return True
                time.sleep(0.02)
            return False
        try:
            e.add(PROMPT)
            e.run()
            e.drain_stores()
            assert step_until(lambda: len(ours("BlockStored")) == 6), ours("BlockStored")
            keys = [k for k, m in ours("BlockStored") if m == "CPU"]
            assert sorted(k for k, m in ours("BlockStored") if m == "STORAGE") == sorted(keys)
            assert all(ev.token_ids == [] and ev.group_idx == 0 for b in e.published
                       for ev in b.events if getattr(ev, "medium", None) == "STORAGE")
            with kvstrata.Client(d.endpoint, timeout=10.0) as c:
                (ns,) = c.list_namespaces().namespaces
                evicted = c.evict(fingerprint=ns.fingerprint, keys=keys[:2],
                                  tier=kvstrata.pb.TIER_L1_DRAM)
                assert evicted.evicted_blocks == 2
                assert step_until(lambda: len(ours("BlockRemoved")) == 2)
                assert sorted(ours("BlockRemoved")) == sorted((k, "CPU") for k in keys[:2])
                list(c.clear())
            assert step_until(lambda: len(ours("BlockRemoved")) == 6), ours("BlockRemoved")
            e.step()
            removed = collections.Counter(ours("BlockRemoved"))
            assert removed == collections.Counter(ours("BlockStored")), "one removal per store"
        finally:
            e.shutdown()


def test_prometheus_counters(model_dir):
    from prometheus_client import REGISTRY, Counter, Gauge, Histogram
    from kvstrata_vllm import KVStrataConnector
    from harness import vllm_config

    prom = KVStrataConnector.build_prom_metrics(
        vllm_config(model_dir, {}), {Gauge: Gauge, Counter: Counter, Histogram: Histogram},
        ["model_name", "engine"], {0: ["tiny", "0"]})
    prom.observe({"hit_tokens": 96, "loaded_units": 6, "lookup_tokens": 100, "unknown": 1})
    assert REGISTRY.get_sample_value("vllm:kvstrata_hit_tokens_total",
                                     {"model_name": "tiny", "engine": "0"}) == 96
    stats = KVStrataConnector.build_kv_connector_stats({"hit_tokens": 96, "lookup_tokens": 128})
    assert stats.reduce()["hit_rate"] == 0.75 and not stats.is_empty()


def test_random_block_hash_seed_is_warned(model_dir, daemon, engines, caplog, monkeypatch):
    """Without PYTHONHASHSEED, vLLM 0.26 (and xxhash on any vLLM) draws the seed of its
    block hashes per process: hits in another instance are impossible, and the connector
    says so at start; with PYTHONHASHSEED set it says nothing."""
    import logging

    from vllm.v1.core import kv_cache_utils

    random_seed = not hasattr(kv_cache_utils, "resolve_none_hash_seed")
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    with caplog.at_level(logging.WARNING, logger="kvstrata_vllm"):
        engines(model_dir, {"endpoint": daemon.endpoint})
    warned = [r for r in caplog.records if "PYTHONHASHSEED" in r.getMessage()]
    assert bool(warned) == random_seed, [r.getMessage() for r in warned]
    caplog.clear()
    monkeypatch.setenv("PYTHONHASHSEED", "0")
    with caplog.at_level(logging.WARNING, logger="kvstrata_vllm"):
        engines(model_dir, {"endpoint": daemon.endpoint})
    assert not [r for r in caplog.records if "PYTHONHASHSEED" in r.getMessage()]
