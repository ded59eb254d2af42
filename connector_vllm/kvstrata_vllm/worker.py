"""Worker side: registration, loads, stores and their completions, per tensor-parallel rank
of a pipeline stage (its namespaces hold that stage's layers: stages.py).

Two data paths, chosen by where vLLM's KV cache lives, each a DataPath (data_path.py):
host_path.HostPath for CPU tensors (vLLM's CPU engine: the daemon's shared memory) and
cuda_path.CudaPath for CUDA tensors (the daemon's copy jobs, layer-wise loads in the step
that uses them). The worker routes vLLM's hooks to the one registered and keeps what both
report in its WorkerBook (worker_book.py): failed blocks, finished requests, load retries,
stats, stored keys and load times.

Any block that could not be loaded is reported by get_block_ids_with_load_errors (vLLM then
recomputes it); an asynchronous load's request is still reported finished receiving in the
same step. An asynchronous load with units below L1 and a deadline (the load planner's) is
loaded as its units reach L1 and gives up at its deadline (staged_loads.py).

Hybrid models (several KV cache groups, namespace.KvGroup): each group is a namespace of its
own, with its own HostCache or CUDA registration over the group's layers.
"""
from __future__ import annotations

import logging
import time
from typing import Any, List, Optional, Set, Tuple

import kvstrata

from .config import ConnectorConfig, open_link
from .cuda_path import CudaPath
from .data_path import DataPath
from .host_cache import HostCache
from .host_path import HostPath
from .kv_layouts import CROSS_LAYER, kv_cache_pieces, kv_layout_name
from .metadata import KVStrataMetadata, KVStrataWorkerMetadata
from .namespace import KvGroup, cache_dtype, kv_groups, namespace_fields
from .stages import engine_ranks, stage_groups
from .staged_loads import StagedLoads
from .stats import StatsCounter
from .worker_book import WorkerBook, ns_key
from . import trace

log = logging.getLogger("kvstrata_vllm")


def tp_rank() -> int:
    """This worker's tensor-parallel rank (0 when vLLM's groups are not initialised)."""
    try:
        from vllm.distributed.parallel_state import (  # noqa: PLC0415
            get_tensor_model_parallel_rank, model_parallel_is_initialized)
        if model_parallel_is_initialized():
            return int(get_tensor_model_parallel_rank())
    except (ImportError, AssertionError, RuntimeError):
        pass
    return 0


def pp_rank() -> Optional[int]:
    """This worker's pipeline stage (vLLM's get_pp_group().rank_in_group); None when vLLM's
    groups are not initialised."""
    try:
        from vllm.distributed.parallel_state import (  # noqa: PLC0415
            get_pp_group, model_parallel_is_initialized)
        if model_parallel_is_initialized():
            return int(get_pp_group().rank_in_group)
    except (ImportError, AssertionError, RuntimeError):
        pass
    return None


class WorkerSide:
    def __init__(self, vllm_config: Any, kv_cache_config: Any, cfg: ConnectorConfig) -> None:
        self.cfg = cfg
        self.groups: List[KvGroup] = kv_groups(kv_cache_config)
        self.block_size = self.groups[0].geometry.block_size
        self.unit_tokens = cfg.unit_tokens(self.block_size)
        self.blocks_per_unit = self.unit_tokens // self.block_size
        ranks = engine_ranks(vllm_config)
        self.tp_size = ranks.tp_size
        self.tp_rank = tp_rank()
        stage = pp_rank()
        if stage is None and ranks.pp_size > 1:
            raise ValueError(f"KVStrataConnector: pipeline_parallel_size is {ranks.pp_size} "
                             f"but vLLM's parallel groups are not initialised, so this worker "
                             f"cannot tell its pipeline stage")
        self.pp_rank = stage or 0
        # Its own KV cache config holds its stage's layers; checked against the scheduler's.
        stage_groups(vllm_config, self.groups, ranks.pp_size, self.pp_rank)
        self.rank = ranks.rank(self.pp_rank, self.tp_rank)  # its leases' key (stages.Ranks)
        self.layout = kv_layout_name(vllm_config)
        model = str(vllm_config.model_config.model)
        kv_dtype = cache_dtype(vllm_config)
        self.fields = {g.index: namespace_fields(g, cfg, model, self.unit_tokens, self.tp_size,
                                                 self.tp_rank, self.layout, kv_dtype,
                                                 pp_size=ranks.pp_size, pp_rank=self.pp_rank)
                       for g in self.groups}
        events = getattr(vllm_config, "kv_events_config", None)
        events_enabled = bool(events is not None and getattr(events, "enable_kv_cache_events",
                                                              False))
        self.io: Optional[DataPath] = None  # the data path, once registered
        name = f"vllm-worker-pp{self.pp_rank}-tp{self.tp_rank}" if ranks.pp_size > 1 else \
            f"vllm-worker-tp{self.tp_rank}"
        self.link = open_link(cfg, name, on_session=self._on_session)
        self.book = WorkerBook(cfg, self.link, self.groups, self.rank, events_enabled)
        # Asynchronous loads with a deadline (units below L1), loaded as they reach L1.
        self.staged = StagedLoads(self.book)
        self.kv_caches: Any = None
        self._disabled_reason: Optional[str] = None
        self._hooks: List[float] = []     # with the trace on: this step's hook call times
        self._idle_wait_s = 0.0  # this step's KVStrataMetadata.idle_wait_ms, in seconds
        self._clock: Any = None           # and trace.thread_clock() at the first of them

    @property
    def stats(self) -> StatsCounter:
        return self.book.stats

    @property
    def per_request_failures(self) -> bool:
        """A hybrid model's failed loads are reported per request (take_failed_recving)."""
        return self.book.per_request_failures

    @property
    def mode(self) -> Optional[str]:
        """"host" or "cuda" once registered; None before and once disabled."""
        return self.io.mode if self.io is not None and self.book.enabled else None

    def _active(self) -> Optional[DataPath]:
        """The data path, None before registration and once disabled."""
        return self.io if self.book.enabled else None

    # ------------------------------------------------------------------ registration

    def _group_caches(self, g: KvGroup) -> Any:
        """The KV caches of one group's layers (all of them for a model with one group)."""
        if len(self.groups) == 1:
            return self.kv_caches
        missing = [n for n in g.layer_names if n not in self.kv_caches]
        if missing:
            raise ValueError(f"KV cache group {g.index} has layers without a KV cache tensor: "
                             f"{missing[:3]}")
        return {n: self.kv_caches[n] for n in g.layer_names}

    def _pieces(self, g: KvGroup) -> Any:
        return kv_cache_pieces(self._group_caches(g), self.layout)

    def register(self, kv_caches: Any, layout: Optional[str] = None) -> None:
        tensors = list(kv_caches.values()) if isinstance(kv_caches, dict) else (
            [kv_caches] if hasattr(kv_caches, "device") else list(kv_caches))
        devices = {t.device.type for t in tensors}
        self.layout = layout or self.layout
        if layout:
            for f in self.fields.values():
                f["kv_layout"] = layout
        self.kv_caches = kv_caches
        try:
            if len(self.groups) > 1 and (layout == CROSS_LAYER or not isinstance(kv_caches, dict)):
                raise ValueError("a model with several KV cache groups needs per-layer KV "
                                 "caches, not one cross-layer tensor")
            if devices == {"cpu"}:
                hosts = {g.index: HostCache(self._pieces(g)) for g in self.groups}
                self.io = HostPath(self.book, hosts, self.blocks_per_unit)
            elif devices == {"cuda"}:
                if self.blocks_per_unit != 1:
                    raise ValueError(f"tokens_per_unit={self.unit_tokens} is not vLLM's block "
                                     f"size {self.block_size}: with CUDA KV caches the daemon "
                                     "copies one engine block per unit")
                self.io = CudaPath(self.book, kv_caches, self.layout, self._pieces)
            else:
                raise ValueError(f"KV cache tensors on {sorted(devices)}: need all CPU or all CUDA")
        except ValueError as err:
            self._disabled_reason = str(err)
            log.error("kvstrata_vllm: KVStrata disabled on this worker: %s", err)
            self.book.enabled = False
            return
        self.book.enabled = True
        self.link.session()  # Register now when the daemon is there (else on first use).

    def _on_session(self, s: kvstrata.Session) -> None:
        for g in self.groups:
            ns = self.link.register_namespace(s, ns_key(g.index), self.fields[g.index])
            io = self._active()
            if io is None:
                continue
            try:
                io.registered(s, g, ns)
            except ValueError as err:
                self.disable(str(err))

    def disable(self, reason: str) -> None:
        """KVStrata stops serving this worker: loads fail (recomputed), stores drop."""
        self._disabled_reason = reason
        self.book.enabled = False
        log.error("kvstrata_vllm: KVStrata disabled on this worker: %s", reason)

    def session_and_ns(self, group: int = 0) -> Tuple[Optional[kvstrata.Session],
                                                      Optional[kvstrata.RegisteredNamespace]]:
        return self.book.session_and_ns(group)

    # ------------------------------------------------------------------ loads

    def start_load(self, meta: KVStrataMetadata, per_layer_hooks: bool = True) -> None:
        """Every step's first hook (start_load_kv), with or without a forward pass: it also
        takes the step's delayed frees, which wait_for_save (skipped by steps without a
        forward pass) must not be the only one to see. per_layer_hooks: False when the
        forward pass will not call wait_for_layer_load (one full CUDA graph)."""
        self.book.start_step(meta)
        self._idle_wait_s = meta.idle_wait_ms / 1e3
        if self.io is not None:
            self.io.start_step(meta)
        if self.staged:
            self.staged.drop(meta.finished)
        retries = self.book.due_retries(meta.finished)
        # A layer-wise path takes a step's same-step loads as one job; the rest load one by one.
        io = self._active()
        layer_wise = io is not None and io.layer_wise
        layered = [r for r in meta.loads if r.sync and layer_wise]
        single = [r for r in meta.loads if not (r.sync and layer_wise)]
        if layered:
            io.load_layer_wise(layered, wait_all=not per_layer_hooks)
        # The largest first: its copy starts while the others are submitted (a hybrid
        # model's full-attention group holds nearly all the blocks of a hit).
        for req in sorted(retries + single, key=lambda r: -len(r.units)):
            try:
                io = self._active()
                if io is None:
                    self.book.fail_load(req, list(range(len(req.units))))
                elif req.give_up is not None and not req.sync:
                    self.staged.start(req, io)  # loaded as its units reach L1
                else:
                    io.load(req)
            except Exception as err:  # noqa: BLE001 - a failed load is a recompute
                log.warning("kvstrata_vllm: load for %s failed: %s (recomputing)", req.req_id, err)
                self.book.fail_load(req, list(range(len(req.units))))

    def wait_layer(self, layer_name: str) -> None:
        """wait_for_layer_load: a same-step load's layer must have landed."""
        if trace.enabled():
            if not self._hooks:
                self._clock = trace.thread_clock()
            self._hooks.append(time.monotonic())
        if self.io is not None:
            self.io.wait_layer(layer_name)

    # ------------------------------------------------------------------ stores

    def save(self, meta: KVStrataMetadata) -> None:
        """Called from wait_for_save: this step's forward pass has written meta.stores."""
        if self._hooks:
            trace.hook_gaps(self._hooks, time.monotonic(), self._clock)
            self._hooks = []
        # An MLA group's units are stored by each stage's rank 0 only (KvGroup.replicated).
        stores = [r for r in meta.stores
                  if self.tp_rank == 0 or not self.groups[r.group].replicated]
        io = self._active()
        if io is not None:
            io.save(stores)
        elif stores:
            self.stats.add("store_dropped_units", sum(len(r.units) for r in stores))

    def handle_preemptions(self, meta: KVStrataMetadata) -> None:
        """Preempted requests' blocks are about to be reused: their stores must be done."""
        io = self._active()
        if io is not None:
            io.handle_preemptions(meta)

    def drain(self, timeout: float) -> bool:
        """Wait up to `timeout` s for the stores in flight; whether they all finished."""
        return self.io is None or self.io.drain(timeout)

    # ------------------------------------------------------------------ completions

    def get_finished(self, finished_req_ids: Set[str]) -> Tuple[Optional[Set[str]], Optional[Set[str]]]:
        io = self.io
        if io is None:
            return self.book.finished(lambda kind, req_id: False)
        if self.staged:  # what reached L1 since: loaded; late loads give up
            self.staged.poll(self._active())
        wait, self._idle_wait_s = self.staged.idle_wait(self._idle_wait_s), 0.0
        if wait > 0 and self.book.enabled:
            io.wait_loads(wait)  # a step without a forward pass: report the loads in it
        io.poll()
        if self.staged:
            self.staged.settle(io)
        return self.book.finished(io.busy_locked)

    def take_invalid(self) -> Set[int]:
        return self.book.take_invalid()

    def take_failed_recving(self) -> Set[str]:
        """Requests whose asynchronous load failed, reported finished receiving in the same
        get_finished (a hybrid model's: vLLM recomputes them whole)."""
        return self.book.take_failed_recving()

    def worker_meta(self) -> Optional[KVStrataWorkerMetadata]:
        return self.book.worker_meta()

    def shutdown(self) -> None:
        if self.io is not None:
            self.io.shutdown()
        self.link.close()
