"""Engine steps between an asynchronous load's plan and its request's first forward pass, in
vLLM's real Scheduler, with loads that land a few ms after their submit as the daemon's GPU
copy jobs do (LateLoads: the host path's loads, reported late).

A hybrid model's hits always load asynchronously (the request waits in
WAITING_FOR_REMOTE_KVS). The engine then runs steps without a forward pass until a worker
reports the load finished; with async scheduling (vLLM's default: a batch queue of two),
the step after that report is scheduled before the scheduler reads it. In a step without a
forward pass the workers wait for the loads in flight -- until the planner's predicted
landing, at least load_planning.IDLE_WAIT_MIN_MS and at most IDLE_WAIT_MAX_MS -- so the load
is reported in the step that submitted it: the forward pass runs in the next step
(synchronous scheduling) or the one after (async), however long the load takes up to that
bound. vLLM's own OffloadingConnector (NativeSteps below: its worker reports a load in the
first step that finds it landed, and never waits) needs more steps once a load outlasts an
empty step.
"""
from __future__ import annotations

import time
from typing import Any, Dict, List, Tuple

import pytest

import kvstrata_vllm.load_planning as load_planning
from kvstrata_vllm.host_path import HostPath
from kvstrata_vllm.request_state import RequestState

from harness import Engine
from test_hybrid import WINDOW, hybrid, stored
from native_offload import NativeEngine
from test_scheduler import PROMPT, ext

PROMPT_96 = PROMPT[:96]
LAND_S = 0.004   # a load lands this long after its submit (an 8K-token L1 load on an H200: ~3.5 ms)
STEP_S = 0.00175  # an empty step of the GPU engine (the gpt-oss run: ~1.75 ms apart)


class LateLoads(HostPath):
    """The host path whose asynchronous loads are reported `land_s` after their submit: busy
    until then (the KV is copied at once), and wait_loads waits for them."""

    def __init__(self, base: HostPath, land_s: float = LAND_S) -> None:
        self.__dict__.update(base.__dict__)
        self.land_s = land_s
        self.lands: Dict[str, float] = {}   # request -> when its last load lands
        self.submits: List[Tuple[str, int, int]] = []   # (request, group, units) in order

    def load(self, req: Any) -> None:
        super().load(req)
        self.submits.append((req.req_id, req.group, len(req.units)))
        with self.book.lock:
            self.book.recved.discard(req.req_id)
            self.lands[req.req_id] = time.monotonic() + self.land_s

    def wait_loads(self, timeout: float) -> None:
        with self.book.lock:
            last = max(self.lands.values(), default=None)
        if last is not None:
            time.sleep(max(0.0, min(last - time.monotonic(), timeout)))

    def poll(self) -> None:
        now = time.monotonic()
        with self.book.lock:
            for req_id, at in list(self.lands.items()):
                if at <= now:
                    del self.lands[req_id]
                    self.book.recved.add(req_id)

    def busy_locked(self, kind: str, req_id: str) -> bool:
        return kind == "load" and req_id in self.lands


def late_loads(engine: Engine, land_s: float = LAND_S) -> None:
    for w in engine.workers:
        side = w.connector.worker
        side.io = LateLoads(side.io, land_s)


def steps_to_forward(engine: Engine, req_id: str, queue: int) -> Tuple[int, List[int]]:
    """Run the engine as vLLM's engine core does with a batch queue of `queue` steps (1:
    synchronous; 2: async scheduling, a step scheduled before the last one's output is
    read), each step taking at least STEP_S. The steps from the one that planned the load
    (the request waits for it) to the one running its first forward pass, and each step's
    scheduled tokens."""
    pending: List[Tuple[Any, Any]] = []
    planned, tokens = None, []
    for n in range(100):
        t0 = time.monotonic()
        so = engine.scheduler.schedule()
        tokens.append(so.total_num_scheduled_tokens)
        pending.append((so, engine.execute(so)))
        if req_id in so.num_scheduled_tokens:
            for done in pending:
                engine.update(*done)
            return n - planned, tokens
        if planned is None and req_id in engine.scheduler.requests:
            planned = n
        time.sleep(max(0.0, STEP_S - (time.monotonic() - t0)))
        if len(pending) >= queue:
            engine.update(*pending.pop(0))
    raise AssertionError(f"{req_id} never ran: {tokens}")


@pytest.mark.parametrize("queue, steps", [(1, 1), (2, 2)])
def test_an_idle_engine_runs_a_loaded_request_in_the_step_after_its_load(
        model_dir, daemon, engines, queue, steps):
    """The load lands within the wait: reported by the step that submitted it, so the
    request's forward pass is the next step (synchronous) or the one after (async)."""
    a = stored(engines, model_dir, daemon, PROMPT_96)
    b = hybrid(engines, model_dir, daemon)
    late_loads(b)
    req = b.add(PROMPT_96, max_tokens=1)
    n, tokens = steps_to_forward(b, req.request_id, queue)
    assert n == steps, tokens
    b.run()
    assert b.outputs[req.request_id] == a.outputs["r1"][:1]


@pytest.mark.parametrize("queue, steps", [(1, 1), (2, 2)])
def test_a_load_longer_than_the_least_wait_is_still_reported_in_its_step(
        model_dir, daemon, engines, queue, steps):
    """A load taking 12 ms (a 32K-token L1 hit of gpt-oss's layers took 5.4 ms on the H200,
    past the 5 ms the idle step used to wait, and its request ran a step later): without a
    prediction the idle step waits up to IDLE_WAIT_MAX_MS, and returns when it landed.
    The largest group's load is submitted first, whatever the metadata's order."""
    a = stored(engines, model_dir, daemon, PROMPT_96)
    b = hybrid(engines, model_dir, daemon)
    late_loads(b, land_s=0.012)
    sched = b.connector.scheduler
    build = sched.build_connector_meta

    def groups_reversed(so):   # the sliding-window group's load first in the metadata
        meta = build(so)
        meta.loads.reverse()
        return meta

    sched.build_connector_meta = groups_reversed
    req = b.add(PROMPT_96, max_tokens=1)
    t0 = time.monotonic()
    n, tokens = steps_to_forward(b, req.request_id, queue)
    assert n == steps, tokens
    assert time.monotonic() - t0 < 0.012 + load_planning.IDLE_WAIT_MAX_MS / 1e3 + 0.5
    submits = b.workers[0].connector.worker.io.submits
    assert [g for _, g, _ in submits] == [0, 1] and submits[0][2] > submits[1][2], submits
    b.run()
    assert b.outputs[req.request_id] == a.outputs["r1"][:1]


def test_the_wait_is_sized_by_the_planners_predicted_landing(model_dir, daemon, engines):
    """With the load planner's predictions: until the first asynchronous load's predicted
    landing with room (x 1.5 + 2 ms), between IDLE_WAIT_MIN_MS and IDLE_WAIT_MAX_MS; an
    overdue load is polled at the least wait; no prediction: the most."""
    e = engines(model_dir, ext(daemon, load_planner="on"), window=WINDOW)
    plans = e.connector.scheduler.plans
    assert plans.idle_wait_ms() == load_planning.IDLE_WAIT_MAX_MS   # nothing in flight
    st = RequestState(request=None)
    plans.inflight["r"] = st
    for predicted, want in [(8.0, 14.0), (1.0, load_planning.IDLE_WAIT_MIN_MS),
                            (40.0, load_planning.IDLE_WAIT_MAX_MS)]:
        st.load_info = (1, 1 << 20, time.monotonic(), predicted, 0, 0)
        assert plans.idle_wait_ms() == pytest.approx(want, abs=0.5), predicted
    st.load_info = (1, 1 << 20, time.monotonic() - 1.0, 8.0, 0, 0)   # a second late
    assert plans.idle_wait_ms() == load_planning.IDLE_WAIT_MIN_MS
    st.load_info = (1, 1 << 20, time.monotonic(), 8.0, 7, 0)   # an in-step load: not waited
    assert plans.idle_wait_ms() == load_planning.IDLE_WAIT_MAX_MS
    # Two loads: sized by the first to land (a quick load does not wait for a slow one's).
    st.load_info = (1, 1 << 20, time.monotonic(), 40.0, 0, 0)
    quick = RequestState(request=None)
    quick.load_info = (1, 1 << 20, time.monotonic(), 4.0, 0, 0)
    plans.inflight["q"] = quick
    assert plans.idle_wait_ms() == pytest.approx(8.0, abs=0.5)
    del plans.inflight["r"], plans.inflight["q"]


def test_without_the_wait_the_load_is_reported_steps_later(model_dir, daemon, engines,
                                                            monkeypatch):
    monkeypatch.setattr(load_planning, "IDLE_WAIT_MAX_MS", 0.0)
    stored(engines, model_dir, daemon, PROMPT_96)
    b = hybrid(engines, model_dir, daemon)
    late_loads(b)
    req = b.add(PROMPT_96, max_tokens=1)
    n, tokens = steps_to_forward(b, req.request_id, 2)
    assert n >= 3, tokens   # the steps it took on the H200 (gpt-oss, 8K): 4


def test_a_busy_step_does_not_wait(model_dir, daemon, engines):
    """A step with a forward pass never waits for another request's load."""
    stored(engines, model_dir, daemon, PROMPT_96)
    b = hybrid(engines, model_dir, daemon)
    late_loads(b)
    busy = b.add(PROMPT[::-1][:40], max_tokens=50)   # one step of prefill, then decodes
    b.step()
    req = b.add(PROMPT_96, max_tokens=1)
    so = b.scheduler.schedule()
    assert so.total_num_scheduled_tokens and busy.request_id in so.num_scheduled_tokens
    assert so.kv_connector_metadata.idle_wait_ms == 0.0
    assert b.scheduler.requests[req.request_id].status.name == "WAITING_FOR_REMOTE_KVS"
    t0 = time.monotonic()
    b.update(so, b.execute(so))
    assert time.monotonic() - t0 < LAND_S + 0.5
    b.run()


@pytest.mark.parametrize("land_s", [LAND_S, 0.012])
def test_native_offload_runs_the_same_request_more_steps_after_its_plan(
        model_dir, daemon, engines, land_s):
    """vLLM's own OffloadingConnector in the same Scheduler, the same hybrid layout, prompt
    and async scheduling, its load landing as late (NativeEngine: its worker reports a load
    in the first step that finds it landed): its request's forward pass runs more steps
    after the plan than KVStrata's, which reports the load in the step that submitted it."""
    native = NativeEngine(model_dir, land_s, WINDOW)
    first = native.add(PROMPT_96, max_tokens=1)
    native.run()
    assert native.outputs[first.request_id]
    native.drop_gpu_prefix_cache()
    again = native.add(PROMPT_96, max_tokens=1)
    n_native, tokens = steps_to_forward(native, again.request_id, 2)
    assert tokens[0] == 0, tokens   # it waited for its load: a hit of vLLM's CPU cache
    stored(engines, model_dir, daemon, PROMPT_96)
    b = hybrid(engines, model_dir, daemon)
    late_loads(b, land_s)
    req = b.add(PROMPT_96, max_tokens=1)
    n, _ = steps_to_forward(b, req.request_id, 2)
    # Native: the steps until one finds the load landed (each at least STEP_S), then vLLM's
    # async-scheduling lag; KVStrata: the lag alone.
    assert n == 2 and n_native >= 1 + int(land_s / STEP_S), (n, n_native, tokens)
    print(f"land {land_s * 1e3:.0f} ms: steps from plan to forward: KVStrata {n}, "
          f"native {n_native}")


def test_the_trace_pickles_only_small_metadata(model_dir, daemon, engines, monkeypatch,
                                               tmp_path):
    """With the trace on, each scheduler step's sched event gives the metadata's pickled size
    -- but for a large load's (more than connector._PICKLED_UNITS units) its units: pickling
    a 32K-token load's metadata costs ~1 ms inside the step whose TTFT the trace times."""
    import json
    import os

    import kvstrata_vllm.connector as kv_connector
    from kvstrata_vllm import trace

    stored(engines, model_dir, daemon, PROMPT_96)
    b = hybrid(engines, model_dir, daemon)
    monkeypatch.setattr(kv_connector, "_PICKLED_UNITS", 4)
    monkeypatch.setattr(trace, "_PATH", str(tmp_path / "trace.jsonl"))
    monkeypatch.setattr(trace, "_fd", None)
    req = b.add(PROMPT_96, max_tokens=1)
    b.run()
    monkeypatch.setattr(trace, "_PATH", None)
    if trace._fd is not None:
        os.close(trace._fd)
    events = [json.loads(line) for line in (tmp_path / "trace.jsonl").read_text().splitlines()]
    sched = [e for e in events if e["ev"] == "sched"]
    assert sched[0].get("meta_units") == 5 + 2 and "meta_bytes" not in sched[0], sched[0]
    assert all(e.get("meta_bytes", 0) > 0 for e in sched[1:]), sched
    assert [e["ev"] for e in events if e["req"] == req.request_id][:2] == ["lookup", "alloc"]
