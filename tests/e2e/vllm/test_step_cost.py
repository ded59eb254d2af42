"""What a request costs the engine's step (issue 21's 1K hit): no lease and no release RPC
for a request vLLM's own prefix cache covers, no store of a unit KVStrata already holds,
a whole-unit prompt's last unit loaded (the step then computes the last token alone, as
with vLLM's own offloading), lease releases sent by a thread, not by the step, and no
per-layer stream wait once a layer-wise load has landed. vLLM's real
Scheduler, a real kvstratad; the scheduler session's calls are counted (or slowed) by
wrapping its methods; the CUDA-mode layer hook runs against stand-ins of the registration's
layer flags and the session's completions (no GPU here).
"""
from __future__ import annotations

import time
from typing import Any, Dict, List

import pytest

from harness import BLOCK, Engine
from kvs_testing import wait_until
from kvstrata_vllm.cuda_path import CudaPath
from prom_text import scrape

WHOLE = [100 + (i * 7) % 300 for i in range(6 * BLOCK)]   # 6 full units, the last one too


def ext(daemon, **extra) -> dict:
    return {"endpoint": daemon.endpoint, **extra}


def count_calls(engine: Engine) -> Dict[str, List[Any]]:
    """The scheduler session's lookups (their lease argument) and lease releases."""
    s = engine.connector.scheduler.link.session()
    calls: Dict[str, List[Any]] = {"lookup": [], "release_lease": []}
    lookup, release = s.lookup_namespaces, s.release_leases

    def counted_lookup(namespaces, keys, lease=False, lease_ttl_ms=0, promote=True):
        calls["lookup"].append(lease)
        return lookup(namespaces, keys, lease=lease, lease_ttl_ms=lease_ttl_ms, promote=promote)

    def counted_release(lease_ids):
        calls["release_lease"].extend(lease_ids)
        return release(lease_ids)

    s.lookup_namespaces, s.release_leases = counted_lookup, counted_release
    return calls


def leases_active(daemon) -> float:
    with daemon.client(timeout=10.0) as c:
        return scrape(c.get_status().metrics_address).value("kvstrata_leases_active")


def stored(engines, model_dir, daemon, prompt: List[int]) -> List[int]:
    """The prompt run in an engine of its own until its units are stored; its output."""
    warm = engines(model_dir, ext(daemon))
    r = warm.add(prompt)
    warm.run()
    warm.drain_stores()
    return warm.outputs[r.request_id]


def stores_planned(engine: Engine) -> int:
    return engine.stats.get("store_units_planned", 0)


def test_gpu_prefix_hit_takes_no_lease_and_stores_nothing(model_dir, daemon, engines):
    """The same prompt (5 full units and a tail) twice in one engine: the second is vLLM's
    own prefix hit of every full unit. Its lookup takes no lease (no load can follow), so
    nothing is released, and nothing is stored again."""
    prompt = WHOLE[:5 * BLOCK + 3]
    e = engines(model_dir, ext(daemon))
    first = e.add(prompt)
    e.run()
    e.drain_stores()
    assert e.stats.get("stored_units") == 5
    planned = stores_planned(e)
    calls = count_calls(e)
    again = e.add(prompt)
    e.run()
    assert e.scheduler.requests.get(again.request_id) is None
    assert calls["lookup"] == [False] and calls["release_lease"] == []
    assert stores_planned(e) == planned
    assert e.outputs[again.request_id] == e.outputs[first.request_id]


def test_gpu_prefix_hit_loads_the_last_unit(model_dir, daemon, engines):
    """A whole-unit prompt twice in one engine: vLLM's own cache covers 5 units (never the
    one holding the last token); the 6th loads from KVStrata, one token short of it, so
    the step computes the last token alone (vLLM's own offloading does the same). Nothing
    is stored again; the worker's load consumed the lookup's lease (nothing released)."""
    e = engines(model_dir, ext(daemon))
    first = e.add(WHOLE)
    e.run()
    e.drain_stores()
    assert e.stats.get("stored_units") == 6
    planned = stores_planned(e)
    calls = count_calls(e)
    scheduled: List[int] = []
    again = e.add(WHOLE)
    while e.scheduler.has_requests():
        so = e.step()
        scheduled.append(so.num_scheduled_tokens.get(again.request_id, 0))
    assert e.stats["hit_tokens"] == BLOCK - 1 and e.stats["loaded_units"] == 1
    assert max(scheduled) == 1                  # the last token, then the decode steps
    assert calls["lookup"] == [True]
    assert wait_until(lambda: leases_active(daemon) == 0, timeout_s=10)
    assert calls["release_lease"] == []
    assert stores_planned(e) == planned
    assert e.outputs[again.request_id] == e.outputs[first.request_id]


def test_external_hit_loads_every_unit_and_stores_none(model_dir, daemon, engines):
    """A second engine: all 6 units load from KVStrata, the 6th too (the hit answers one
    token less: vLLM computes the last token again); nothing is stored again."""
    expected = stored(engines, model_dir, daemon, WHOLE)
    e = engines(model_dir, ext(daemon))
    calls = count_calls(e)
    r = e.add(WHOLE)
    e.run()
    assert e.stats["hit_tokens"] == 6 * BLOCK - 1 and e.stats["loaded_units"] == 6
    assert calls["lookup"] == [True]
    assert stores_planned(e) == 0
    assert e.outputs[r.request_id] == expected


@pytest.mark.parametrize("limit,units", [(6 * BLOCK, 6), (6 * BLOCK - 1, 5)])
def test_long_layer_wise_load_stops_one_unit_short(model_dir, daemon, engines, limit, units):
    """A same-step load on a GPU engine (the scheduler side told so here: the workers are
    CPU stand-ins) loads the last token's unit only while the load is at most
    full_hit_max_load_tokens; a longer one stops a unit short (that unit's forward pass
    overlaps a layer-wise load). Same output either way."""
    expected = stored(engines, model_dir, daemon, WHOLE)
    e = engines(model_dir, ext(daemon, load_mode="auto", full_hit_max_load_tokens=limit))
    e.connector.scheduler.host_mode = False
    r = e.add(WHOLE)
    e.run()
    assert e.stats["loaded_units"] == units
    assert e.stats["hit_tokens"] == (6 * BLOCK - 1 if units == 6 else 5 * BLOCK)
    assert e.outputs[r.request_id] == expected


def test_a_unit_kvstrata_lacks_is_still_stored(model_dir, daemon, engines):
    """The lookup's answer, not the prompt's shape, decides: a whole-unit prompt whose
    last unit KVStrata does not hold (only a shorter prefix was stored) stores that unit."""
    stored(engines, model_dir, daemon, WHOLE[:5 * BLOCK + 3])   # stores units 0-4 only
    e = engines(model_dir, ext(daemon))
    e.add(WHOLE)
    e.run()
    e.drain_stores()
    assert e.stats["loaded_units"] == 5
    assert stores_planned(e) == 1 and e.stats.get("stored_units") == 1


def test_lease_release_does_not_hold_the_step(model_dir, daemon, engines):
    """Leases no load consumes -- two requests whose same-step loads run in one step (on a
    GPU, one layer-wise job, which consumes no lease) -- are released after that step by
    the connector's release thread: a daemon that takes a second to answer a release holds
    up no step (the requests run to their end meanwhile), and the releases still arrive."""
    stored(engines, model_dir, daemon, WHOLE)
    e = engines(model_dir, ext(daemon, load_mode="sync"))
    s = e.connector.scheduler.link.session()
    real, released = s.release_leases, []

    def slow_release(lease_ids):
        time.sleep(1.0)
        released.append(real(lease_ids))

    s.release_leases = slow_release
    a, b = e.add(WHOLE), e.add(WHOLE)
    t0 = time.monotonic()
    e.run()
    assert time.monotonic() - t0 < 0.9 and not released
    # b's units past the first are vLLM's own prefix hits on a's blocks by then.
    assert e.stats["loaded_units"] == 7 and {a.request_id, b.request_id} <= set(e.finished)
    assert wait_until(lambda: released == [1, 1], timeout_s=10), released
    assert wait_until(lambda: leases_active(daemon) == 0, timeout_s=10)


class _Flags:
    """A registration's layer flags, recording the stream waits asked for."""

    def __init__(self) -> None:
        self.waits: List[int] = []
        self.released: List[int] = []

    def wait(self, layer: int, value: int) -> None:
        self.waits.append(layer)

    def release(self, value: int) -> None:
        self.released.append(value)


class _Registration:
    def __init__(self) -> None:
        self.layer_flags = _Flags()


class _Completions:
    """The session's completions as take_completions hands them out."""

    def __init__(self) -> None:
        self.arrived: Dict[int, Any] = {}

    def take_completions(self) -> Dict[int, Any]:
        out, self.arrived = self.arrived, {}
        return out


class _Done:
    def __init__(self, failed: List[int]) -> None:
        self.ok, self.failed_blocks = not failed, failed


@pytest.mark.parametrize("failed", [[], [1]])
def test_layer_waits_stop_once_the_load_landed(model_dir, daemon, engines, failed):
    """wait_for_layer_load asks the GPU to wait for each layer's word until the layer-wise
    load's completion is in; from then on every layer has landed and no wait is issued --
    unless the completion reports failed blocks (a refusal that came after the submit
    returned, or lost blocks): the worker writes the words itself at once, and the later
    layers still wait on them (their blocks count as failed)."""
    e = engines(model_dir, ext(daemon))
    w = e.workers[0].connector.worker
    # The CUDA data path over this (CPU) worker's KV caches and bookkeeping.
    io = CudaPath(w.book, w.kv_caches, w.layout, pieces_of=lambda g: None)
    names = sorted(io.layer_of, key=io.layer_of.get)
    assert len(names) == 2
    reg, completions, link_session = _Registration(), _Completions(), w.link._session
    io.regs[0], w.link._session = reg, completions
    try:
        io._sync_job, io._sync_done, io._sync_waited, io._gpu_waits = (7, [3, 4], ["r"], 1), None, set(), 0
        io.wait_layer(names[0])                    # no completion yet: the stream waits
        completions.arrived[7] = _Done(failed)
        io.wait_layer(names[1])                    # landed (or failed): wait only if failed
        assert reg.layer_flags.waits == ([0, 1] if failed else [0])
        # A failed job's words are written by the worker at once (not at get_finished):
        # the stream waiting for them goes on.
        assert reg.layer_flags.released == ([1] if failed else [])
        assert io._sync_waited == {0, 1} and io._sync_done is not None
    finally:
        w.link._session = link_session
