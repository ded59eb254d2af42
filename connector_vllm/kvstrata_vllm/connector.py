"""KVStrataConnector: vLLM's KVConnectorBase_V1 on top of the kvstrata client.

    --kv-transfer-config '{"kv_connector":"KVStrataConnector",
                           "kv_connector_module_path":"kvstrata_vllm","kv_role":"kv_both",
                           "kv_load_failure_policy":"recompute",
                           "kv_connector_extra_config":{"endpoint":"/run/kvstrata/kvstrata.sock"}}'

The scheduler-side half is kvstrata_vllm.scheduler.SchedulerSide, the worker-side half
kvstrata_vllm.worker.WorkerSide; this class only routes vLLM's calls to them.
"""
from __future__ import annotations

import pickle
from typing import Any, Dict, Iterable, Optional, Set, Tuple

from vllm.distributed.kv_transfer.kv_connector.v1.base import (KVConnectorBase_V1,
                                                               KVConnectorRole, SupportsHMA)

try:  # vLLM >= 0.27: transfer results with failed receives per request (hybrid models).
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorTransferResults
except ImportError:
    KVConnectorTransferResults = None  # type: ignore[assignment,misc]

try:  # vLLM >= 0.27 reports external hits by tier; 0.26 has no such module and never asks.
    from vllm.v1.metrics.cache_hit_source import CacheHitSource
except ImportError:
    CacheHitSource = None  # type: ignore[assignment,misc]

from . import trace
from .config import parse_config
from .kv_layouts import CROSS_LAYER
from .metadata import KVStrataMetadata
from .scheduler import SchedulerSide
from .stats import KVStrataPromMetrics, KVStrataStats
from .worker import WorkerSide

# The hooks whose time inside the connector the trace sums per step (trace.timed).
WORKER_HOOKS = ("start_load_kv", "wait_for_layer_load", "save_kv_layer", "wait_for_save",
                "get_finished")
SCHEDULER_HOOKS = ("get_num_new_matched_tokens", "update_state_after_alloc",
                   "build_connector_meta", "update_connector_output", "request_finished")
# The trace's sched event pickles the step's metadata (meta_bytes) up to this many units.
_PICKLED_UNITS = 256


def per_layer_hooks(forward_context: Any) -> bool:
    """Whether this step's forward pass will call wait_for_layer_load: not when it replays
    one full CUDA graph (vLLM's V1 runner says so in the context; the V2 runner calls
    start_load_kv outside the context, whose attention metadata is then None, and the
    attention ops skip the hook without metadata)."""
    if forward_context is None or getattr(forward_context, "attn_metadata", None) is None:
        return False
    mode = getattr(forward_context, "cudagraph_runtime_mode", None)
    return getattr(mode, "name", "") != "FULL"


class KVStrataConnector(KVConnectorBase_V1, SupportsHMA):
    """Works on vLLM 0.26.x and 0.33.x: it uses only the hooks both call, and methods that
    only the newer vLLM calls (hit sources, requires_kv_delivery) are simply unused on 0.26.
    Nothing depends on a hook that a step may skip (wait_for_save has no forward pass to
    follow on some steps). SupportsHMA: hybrid models keep vLLM's hybrid KV cache manager
    (one namespace per KV cache group, namespace.KvGroup)."""

    if CacheHitSource is not None:
        _cache_hit_source = CacheHitSource.HOST

    def __init__(self, vllm_config: Any, role: KVConnectorRole, kv_cache_config: Any) -> None:
        super().__init__(vllm_config, role, kv_cache_config)
        cfg = parse_config(self._kv_transfer_config.kv_connector_extra_config)
        self.scheduler: Optional[SchedulerSide] = None
        self.worker: Optional[WorkerSide] = None
        if role == KVConnectorRole.SCHEDULER:
            self.scheduler = SchedulerSide(vllm_config, kv_cache_config, cfg)
        else:
            self.worker = WorkerSide(vllm_config, kv_cache_config, cfg)

    @property
    def requires_kv_delivery(self) -> bool:
        return False  # A best-effort cache: a dropped store is a later miss.

    # ------------------------------------------------------------------ worker side

    def register_kv_caches(self, kv_caches: Dict[str, Any]) -> None:
        assert self.worker is not None
        self.worker.register(kv_caches)

    def register_cross_layers_kv_cache(self, kv_cache: Any, attn_backend: Any = None) -> None:
        """One tensor holding every layer, blocks outermost (older vLLM calls this)."""
        assert self.worker is not None
        self.worker.register(kv_cache, layout=CROSS_LAYER)

    @trace.timed("start_load_kv")
    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        """Called every step, with or without a forward pass (vLLM 0.26 and 0.33 alike)."""
        assert self.worker is not None
        meta = self._connector_metadata
        trace.event("step_start", "")
        if isinstance(meta, KVStrataMetadata):
            self.worker.start_load(meta, per_layer_hooks=per_layer_hooks(forward_context))

    @trace.timed("wait_for_layer_load")
    def wait_for_layer_load(self, layer_name: str) -> None:
        """A same-step load: the current stream waits for this layer's blocks (GPU-side)."""
        assert self.worker is not None
        self.worker.wait_layer(layer_name)

    @trace.timed("save_kv_layer")
    def save_kv_layer(self, layer_name: str, kv_layer: Any, attn_metadata: Any,
                      **kwargs: Any) -> None:
        return  # Stores are taken in wait_for_save, after the whole forward pass.

    @trace.timed("wait_for_save")
    def wait_for_save(self) -> None:
        assert self.worker is not None
        meta = self._connector_metadata
        trace.event("step_save", "")
        if isinstance(meta, KVStrataMetadata):
            self.worker.save(meta)

    def handle_preemptions(self, kv_connector_metadata: Any) -> None:
        if self.worker is not None and isinstance(kv_connector_metadata, KVStrataMetadata):
            self.worker.handle_preemptions(kv_connector_metadata)

    def get_finished(self, finished_req_ids: Set[str]) -> Tuple[Optional[Set[str]], Optional[Set[str]]]:
        assert self.worker is not None
        if not trace.enabled():
            return self.worker.get_finished(finished_req_ids)
        done = self._get_finished(finished_req_ids)
        trace.event("step_finished", "", us=trace.take_hook_us(*WORKER_HOOKS))
        return done

    @trace.timed("get_finished")
    def _get_finished(self, finished_req_ids: Set[str]) -> Tuple[Optional[Set[str]], Optional[Set[str]]]:
        assert self.worker is not None
        return self.worker.get_finished(finished_req_ids)

    if KVConnectorTransferResults is not None:
        def get_transfer_results(self, finished_req_ids: Set[str]) -> Any:
            """vLLM >= 0.27: get_finished, plus a hybrid model's failed loads by request
            (vLLM refuses block ids from a model with several KV cache groups)."""
            assert self.worker is not None
            sending, recving = self.get_finished(finished_req_ids)
            return KVConnectorTransferResults(finished_sending=set(sending or ()),
                                              finished_recving=set(recving or ()),
                                              failed_recving=self.worker.take_failed_recving())

    def get_block_ids_with_load_errors(self) -> Set[int]:
        """Failed blocks; none for a hybrid model on a vLLM that takes failed receives per
        request (get_transfer_results). vLLM 0.26 has no such report: it gets the block
        ids, which its scheduler cannot map back to a hybrid model's requests."""
        if self.worker is None:
            return set()
        invalid = self.worker.take_invalid()
        if self.worker.per_request_failures and KVConnectorTransferResults is not None:
            return set()
        return invalid

    def build_connector_worker_meta(self) -> Any:
        return self.worker.worker_meta() if self.worker is not None else None

    def get_kv_connector_stats(self) -> Optional[KVStrataStats]:
        side = self.worker if self.worker is not None else self.scheduler
        return side.stats.take() if side is not None else None

    @classmethod
    def build_kv_connector_stats(cls, data: Optional[Dict[str, Any]] = None) -> KVStrataStats:
        return KVStrataStats(data=dict(data or {}))

    @classmethod
    def build_prom_metrics(cls, vllm_config: Any, metric_types: Any, labelnames: Any,
                           per_engine_labelvalues: Any) -> KVStrataPromMetrics:
        return KVStrataPromMetrics(vllm_config, metric_types, labelnames, per_engine_labelvalues)

    def shutdown(self) -> None:
        if self.worker is not None:
            self.worker.shutdown()
        if self.scheduler is not None:
            self.scheduler.shutdown()

    # ------------------------------------------------------------------ scheduler side

    @trace.timed("get_num_new_matched_tokens")
    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int) -> Tuple[int, bool]:
        assert self.scheduler is not None
        return self.scheduler.get_num_new_matched_tokens(request, num_computed_tokens)

    def get_external_cache_hit_sources(self, request: Any,
                                       num_external_tokens: int) -> Dict[Any, int]:
        """The external hit split by tier: L1 is HOST, L2/L3 are DISK (vLLM >= 0.27)."""
        assert self.scheduler is not None and CacheHitSource is not None
        split = self.scheduler.hit_sources(request, num_external_tokens)
        return {CacheHitSource(name): n for name, n in split.items() if n}

    @trace.timed("update_state_after_alloc")
    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
        assert self.scheduler is not None
        self.scheduler.update_state_after_alloc(request, blocks, num_external_tokens)

    def build_connector_meta(self, scheduler_output: Any) -> KVStrataMetadata:
        assert self.scheduler is not None
        if not trace.enabled():
            return self.scheduler.build_connector_meta(scheduler_output)
        meta = self._build_connector_meta(scheduler_output)
        units = sum(len(r.units) for r in meta.loads) + sum(len(r.units) for r in meta.stores)
        # Pickled only when small: a 32K-token load's metadata took ~1 ms to pickle, inside
        # the engine's step (the timeline TTFT is measured on), which a TP=1 engine, passing
        # the metadata in its own process, never pays.
        size = {"meta_bytes": len(pickle.dumps(meta))} if units <= _PICKLED_UNITS else \
            {"meta_units": units}
        trace.event("sched", "", **size, us=trace.take_hook_us(*SCHEDULER_HOOKS))
        return meta

    @trace.timed("build_connector_meta")
    def _build_connector_meta(self, scheduler_output: Any) -> KVStrataMetadata:
        assert self.scheduler is not None
        return self.scheduler.build_connector_meta(scheduler_output)

    @trace.timed("update_connector_output")
    def update_connector_output(self, connector_output: Any) -> None:
        assert self.scheduler is not None
        self.scheduler.update_connector_output(connector_output)

    @trace.timed("request_finished")
    def request_finished(self, request: Any, block_ids: Any) -> Tuple[bool, Optional[Dict[str, Any]]]:
        assert self.scheduler is not None
        return self.scheduler.request_finished(request, block_ids)

    @trace.timed("request_finished")
    def request_finished_all_groups(self, request: Any,
                                    block_ids: Tuple[Any, ...]) -> Tuple[bool, Optional[Dict[str, Any]]]:
        """SupportsHMA: request_finished with every KV cache group's blocks."""
        assert self.scheduler is not None
        return self.scheduler.request_finished(request, block_ids)

    def take_events(self) -> Iterable[Any]:
        return self.scheduler.take_events() if self.scheduler is not None else ()
