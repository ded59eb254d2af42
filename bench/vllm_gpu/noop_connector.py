"""A KV connector that loads and stores nothing, for the GPU benchmark's control roles.

vLLM runs its connector-enabled paths around it (start_load_kv, the per-layer
wait_for_layer_load / save_kv_layer of every attention layer, wait_for_save, get_finished;
the scheduler-side lookups and metadata) while it answers "no hit" and does no work, so an
engine with it shows what vLLM's own connector paths cost against an engine without a
connector (`none`) and one with KVStrataConnector (`kvstrata`). It logs the same per-step
trace events as KVStrataConnector (kvstrata_vllm.trace: step_start, hooks, step_save,
step_finished, sched), so the three compare step by step.

kv_connector_extra_config "link" (engine.py's roles):
  absent      noop: nothing but the trace
  "session"   noop_link: also KVStrataConnector's own scheduler- and worker-side objects
              (kvstrata_vllm.SchedulerSide / WorkerSide: their daemon sessions, heartbeat
              threads, fast-path sockets, the worker's completion stream), idle: never asked
  "register"  noop_reg: as "session", and the worker registers the GPU KV cache with the
              daemon (CUDA IPC handles, layer flags), as KVStrataConnector does
"""
from __future__ import annotations

import time
from typing import Any, List, Optional, Set, Tuple

from vllm.distributed.kv_transfer.kv_connector.v1.base import (KVConnectorBase_V1,
                                                               KVConnectorMetadata,
                                                               KVConnectorRole)

from kvstrata_vllm import trace
from kvstrata_vllm.connector import SCHEDULER_HOOKS, WORKER_HOOKS


class NoopTraceConnector(KVConnectorBase_V1):
    def __init__(self, vllm_config: Any, role: KVConnectorRole, kv_cache_config: Any) -> None:
        super().__init__(vllm_config, role, kv_cache_config)
        extra = dict(self._kv_transfer_config.kv_connector_extra_config or {})
        self.link_mode: Optional[str] = extra.pop("link", None)
        self._hooks: List[float] = []
        self._clock: Any = None
        self.side: Any = None
        if self.link_mode in ("session", "register"):
            from kvstrata_vllm.config import parse_config  # noqa: PLC0415
            cfg = parse_config(extra)
            if role == KVConnectorRole.SCHEDULER:
                from kvstrata_vllm.scheduler import SchedulerSide  # noqa: PLC0415
                self.side = SchedulerSide(vllm_config, kv_cache_config, cfg)
            else:
                from kvstrata_vllm.worker import WorkerSide  # noqa: PLC0415
                self.side = WorkerSide(vllm_config, kv_cache_config, cfg)

    # ------------------------------------------------------------------ worker side

    def register_kv_caches(self, kv_caches: Any) -> None:
        if self.side is None:
            return
        if self.link_mode == "register":
            self.side.register(kv_caches)  # the daemon maps the KV cache (CUDA IPC)
        s = self.side.link.session()
        if s is not None:
            s.take_completions()           # opens the completion stream, as a first job does

    @trace.timed("start_load_kv")
    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        trace.event("step_start", "")

    @trace.timed("wait_for_layer_load")
    def wait_for_layer_load(self, layer_name: str) -> None:
        if trace.enabled():
            if not self._hooks:
                self._clock = trace.thread_clock()
            self._hooks.append(time.monotonic())

    @trace.timed("save_kv_layer")
    def save_kv_layer(self, layer_name: str, kv_layer: Any, attn_metadata: Any,
                      **kwargs: Any) -> None:
        return

    @trace.timed("wait_for_save")
    def wait_for_save(self) -> None:
        trace.event("step_save", "")
        if self._hooks:
            trace.hook_gaps(self._hooks, time.monotonic(), self._clock)
            self._hooks = []

    def get_finished(self, finished_req_ids: Set[str]) -> Tuple[Optional[Set[str]], Optional[Set[str]]]:
        trace.event("step_finished", "", us=trace.take_hook_us(*WORKER_HOOKS))
        return None, None

    # ------------------------------------------------------------------ scheduler side

    @trace.timed("get_num_new_matched_tokens")
    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int) -> Tuple[int, bool]:
        return 0, False

    @trace.timed("update_state_after_alloc")
    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
        return

    def build_connector_meta(self, scheduler_output: Any) -> KVConnectorMetadata:
        trace.event("sched", "", meta_bytes=0, us=trace.take_hook_us(*SCHEDULER_HOOKS))
        return KVConnectorMetadata()

    @trace.timed("request_finished")
    def request_finished(self, request: Any, block_ids: Any) -> Tuple[bool, None]:
        return False, None

    def shutdown(self) -> None:
        if self.side is not None:
            self.side.shutdown()
