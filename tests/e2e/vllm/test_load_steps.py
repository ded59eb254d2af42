"""Engine steps between an asynchronous load's plan and its request's first forward pass, in
vLLM's real Scheduler, with loads that land a few ms after their submit as the daemon's GPU
copy jobs do (LateLoads: the host path's loads, reported late).

A hybrid model's hits always load asynchronously (the request waits in
WAITING_FOR_REMOTE_KVS). The engine then runs steps without a forward pass until a worker
reports the load finished; with async scheduling (vLLM's default: a batch queue of two),
the step after that report is scheduled before the scheduler reads it. In a step without a
forward pass the workers wait (up to scheduler._IDLE_LOAD_WAIT_MS) for the loads in
flight, so the load is reported in the step that submitted it.
"""
from __future__ import annotations

import time
from typing import Any, Dict, List, Tuple

import pytest

import kvstrata_vllm.scheduler as kv_scheduler
from kvstrata_vllm.host_path import HostPath

from harness import Engine
from test_hybrid import hybrid, stored
from test_scheduler import PROMPT

PROMPT_96 = PROMPT[:96]
LAND_S = 0.004   # a load lands this long after its submit (an 8K-token L1 load on an H200: ~3.5 ms)
STEP_S = 0.00175  # an empty step of the GPU engine (the gpt-oss run: ~1.75 ms apart)


class LateLoads(HostPath):
    """The host path whose asynchronous loads are reported LAND_S after their submit: busy
    until then (the KV is copied at once), and wait_loads waits for them."""

    def __init__(self, base: HostPath) -> None:
        self.__dict__.update(base.__dict__)
        self.lands: Dict[str, float] = {}   # request -> when its last load lands

    def load(self, req: Any) -> None:
        super().load(req)
        with self.book.lock:
            self.book.recved.discard(req.req_id)
            self.lands[req.req_id] = time.monotonic() + LAND_S

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


def late_loads(engine: Engine) -> None:
    for w in engine.workers:
        side = w.connector.worker
        side.io = LateLoads(side.io)


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


def test_without_the_wait_the_load_is_reported_steps_later(model_dir, daemon, engines,
                                                            monkeypatch):
    monkeypatch.setattr(kv_scheduler, "_IDLE_LOAD_WAIT_MS", 0.0)
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
