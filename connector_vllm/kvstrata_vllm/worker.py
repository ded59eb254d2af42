"""Worker side: registration, loads, stores and their completions, per tensor-parallel rank.

Two data paths, chosen by where vLLM's KV cache lives; in both a block's bytes are the KV
cache's pieces in kv_layouts.py's order:
- host mode (CPU tensors, vLLM's CPU engine): units are gathered from the KV cache into
  rows during wait_for_save (after the forward pass wrote them) and stored by a background
  thread through the daemon's shared memory; loads copy slots into rows and scatter them
  into the allocated blocks in start_load_kv (host_cache.py: HostCache, StoreThread).
- CUDA mode: the KV cache tensors are registered with the daemon through CUDA IPC; stores
  are jobs that wait for an IPC event recorded after the forward pass; loads are jobs; the
  completions arrive on the session's completion stream. One unit = one vLLM block here
  (the daemon copies engine blocks one to one).

Loads in the step that uses them (RequestTransfer.sync, config load_mode): in CUDA mode all
of a step's are one layer-wise job, submitted in start_load_kv; the daemon writes the job's
value into a per-layer GPU word once that layer's copies landed, and wait_for_layer_load
makes the forward pass's stream wait for its layer's word (cuStreamWaitValue64: no CPU
wait) -- until the job's completion has arrived (every layer landed): the later layers
skip the driver call. When the forward pass runs as one full CUDA graph (no per-layer
hook), start_load_kv waits for every layer instead; a layer whose hook never ran makes the
whole job count as failed. get_finished waits for the job's completion, so its failed
blocks reach vLLM in the same step (vLLM then discards the step's output for those requests
and recomputes); words the daemon did not write are written here, so the stream never
waits forever.

Any block that could not be loaded is reported by get_block_ids_with_load_errors (vLLM then
recomputes it); an asynchronous load's request is still reported finished receiving in the
same step.

Hybrid models (several KV cache groups, namespace.KvGroup): each group is a namespace of its
own, with its own HostCache or CUDA registration over the group's layers (vLLM's hybrid
allocator lets layers of different groups share one tensor: the daemon opens such memory
once). Their loads are asynchronous (the layer-wise load serves one group), and a store that
still reads a sliding-window block vLLM hands out again (KVStrataMetadata.new_blocks) is
waited for before the step's forward pass.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Dict, List, Optional, Set, Tuple

import kvstrata

from .config import ConnectorConfig, open_link
from .host_cache import HostCache, StoreThread
from .kv_layouts import CROSS_LAYER, kv_cache_pieces, kv_layout_name, layer_names
from .load_retries import VLLM_FAILED_RECVING, LoadRetries
from .metadata import KVStrataMetadata, KVStrataWorkerMetadata, RequestTransfer
from .namespace import KvGroup, cache_dtype, kv_groups, namespace_fields
from .stats import StatsCounter
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


def failed_indices(completion: Any, count: int) -> Set[int]:
    """The job indices a JobCompletion reports failed; every one of the `count` when the
    job failed without naming blocks."""
    failed = set(completion.failed_blocks)
    return failed if completion.ok or failed else set(range(count))


class WorkerSide:
    def __init__(self, vllm_config: Any, kv_cache_config: Any, cfg: ConnectorConfig) -> None:
        self.cfg = cfg
        self.groups: List[KvGroup] = kv_groups(kv_cache_config)
        self.block_size = self.groups[0].geometry.block_size
        self.unit_tokens = cfg.unit_tokens(self.block_size)
        self.blocks_per_unit = self.unit_tokens // self.block_size
        self.tp_size = int(getattr(vllm_config.parallel_config, "tensor_parallel_size", 1))
        self.tp_rank = tp_rank()
        self.layout = kv_layout_name(vllm_config)
        model = str(vllm_config.model_config.model)
        kv_dtype = cache_dtype(vllm_config)
        self.fields = {g.index: namespace_fields(g, cfg, model, self.unit_tokens, self.tp_size,
                                                 self.tp_rank, self.layout, kv_dtype)
                       for g in self.groups}
        events = getattr(vllm_config, "kv_events_config", None)
        self.events_enabled = bool(events is not None and getattr(events, "enable_kv_cache_events",
                                                                   False))
        self.link = open_link(cfg, f"vllm-worker-tp{self.tp_rank}",
                              on_session=self._on_session)
        self.stats = StatsCounter()
        self.mode: Optional[str] = None        # "host" or "cuda" once registered
        self.hosts: Dict[int, HostCache] = {}  # per KV cache group (host mode)
        self.kv_caches: Any = None
        self.regs: Dict[int, kvstrata.CudaRegistration] = {}  # per KV cache group (CUDA)
        self.store_thread: Optional[StoreThread] = None
        self._lock = threading.Lock()
        self._stored: Dict[bytes, int] = {}
        self._load_ms: List[Tuple[Tuple[str, ...], float]] = []  # loads timed, by _lock
        self._step = 0  # the scheduler's number of the step running (KVStrataMetadata.step)
        self._invalid: Set[int] = set()
        self._recved: Set[str] = set()
        self._sent: Set[str] = set()
        self._delayed: Set[str] = set()
        # CUDA mode: job id -> (kind, request id, block ids, keys)
        self._jobs: Dict[int, Tuple[str, str, List[int], List[bytes]]] = {}
        self._req_jobs: Dict[Tuple[str, str], Set[int]] = {}
        # Stores of sliding-window groups in flight: job id -> the blocks they read.
        self._window_stores: Dict[int, Set[int]] = {}
        # Requests whose asynchronous load failed in part: finished receiving once none of
        # their other loads (a hybrid model's other groups) is in flight.
        self._failed_recv: Set[str] = set()
        # A hybrid model's failed loads, reported per request (take_failed_recving): vLLM
        # cannot map block ids back to requests when they repeat across groups.
        self.per_request_failures = len(self.groups) > 1
        self._failed_reported: Set[str] = set()
        # vLLM 0.26 and a hybrid model: failed loads are retried (the data is pinned by the
        # lookup's lease; a daemon restart keeps it in L2), the request waiting meanwhile.
        self.retry_failed_loads = self.per_request_failures and not VLLM_FAILED_RECVING
        self._retries = LoadRetries()
        self._load_reqs: Dict[int, RequestTransfer] = {}    # async CUDA load job -> its transfer
        self._disabled_reason: Optional[str] = None
        self._layer_of: Dict[str, int] = {}  # vLLM layer name -> registered layer number
        # This step's layer-wise load: (job id, block ids, request ids, flag value), its
        # completion if it came early, and the layers waited.
        self._sync_job: Optional[Tuple[int, List[int], List[str], int]] = None
        self._sync_done: Any = None
        self._sync_waited: Set[int] = set()
        self._sync_waited_all = False
        self._gpu_waits = 0  # stream waits this layer-wise load issued (before it landed)
        self._warned_hooks = False
        self._marks = trace.GpuMarks()  # the trace's GPU timeline of layer-wise loads
        self._hooks: List[float] = []     # with the trace on: this step's hook call times
        self._clock: Any = None           # and trace.thread_clock() at the first of them

    # The first KV cache group's host cache / CUDA registration (the only one of a model
    # with one group; the layer-wise load serves it).
    @property
    def host(self) -> Optional[HostCache]:
        return self.hosts.get(0)

    @property
    def reg(self) -> Optional[kvstrata.CudaRegistration]:
        return self.regs.get(0)

    @reg.setter
    def reg(self, value: Optional[kvstrata.CudaRegistration]) -> None:
        if value is None:
            self.regs.pop(0, None)
        else:
            self.regs[0] = value

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

    def register(self, kv_caches: Any, layout: Optional[str] = None) -> None:
        tensors = list(kv_caches.values()) if isinstance(kv_caches, dict) else (
            [kv_caches] if hasattr(kv_caches, "device") else list(kv_caches))
        devices = {t.device.type for t in tensors}
        self.layout = layout or self.layout
        if layout:
            for f in self.fields.values():
                f["kv_layout"] = layout
        self.kv_caches = kv_caches
        if isinstance(kv_caches, dict) and layout != CROSS_LAYER:
            self._layer_of = {str(n): i for i, n in enumerate(layer_names(kv_caches))}
        try:
            if len(self.groups) > 1 and (layout == CROSS_LAYER or not isinstance(kv_caches, dict)):
                raise ValueError("a model with several KV cache groups needs per-layer KV "
                                 "caches, not one cross-layer tensor")
            if devices == {"cpu"}:
                self.mode = "host"
                self.hosts = {g.index: HostCache(kv_cache_pieces(self._group_caches(g),
                                                                 self.layout))
                              for g in self.groups}
                self.store_thread = StoreThread(self)
            elif devices == {"cuda"}:
                if self.blocks_per_unit != 1:
                    raise ValueError(f"tokens_per_unit={self.unit_tokens} is not vLLM's block "
                                     f"size {self.block_size}: with CUDA KV caches the daemon "
                                     "copies one engine block per unit")
                self.mode = "cuda"
            else:
                raise ValueError(f"KV cache tensors on {sorted(devices)}: need all CPU or all CUDA")
        except ValueError as err:
            self._disabled_reason = str(err)
            log.error("kvstrata_vllm: KVStrata disabled on this worker: %s", err)
            self.mode = None
            return
        self.link.session()  # Register now when the daemon is there (else on first use).

    def _on_session(self, s: kvstrata.Session) -> None:
        for g in self.groups:
            ns = self.link.register_namespace(s, _ns_key(g.index), self.fields[g.index])
            host = self.hosts.get(g.index)
            if self.mode == "host" and host is not None and ns.bytes_per_block != \
                    host.block_bytes * self.blocks_per_unit:
                self._disable(f"the namespace has {ns.bytes_per_block} bytes per unit but the "
                              f"KV cache holds {host.block_bytes * self.blocks_per_unit}")
            if self.mode == "cuda" and g.index not in self.regs:
                try:
                    self.regs[g.index] = s.register_cuda_kv_caches(
                        ns, kv_cache_pieces(self._group_caches(g), self.layout),
                        layer_flags=len(self.groups) == 1)
                except (ValueError, TypeError) as err:  # The tensors do not fit: not transient.
                    self._disable(f"registering the CUDA KV caches: {err}")

    def _disable(self, reason: str) -> None:
        self._disabled_reason = reason
        self.mode = None
        log.error("kvstrata_vllm: KVStrata disabled on this worker: %s", reason)

    def session_and_ns(self, group: int = 0) -> Tuple[Optional[kvstrata.Session],
                                                      Optional[kvstrata.RegisteredNamespace]]:
        if self.mode is None:
            return None, None
        s = self.link.session()
        if s is None or self.mode is None:
            return None, None
        return s, self.link.namespaces.get(_ns_key(group))

    def note_stored(self, keys: List[bytes], group: int = 0) -> None:
        """Keys stored, for the KV events: those of group 0 speak for every group."""
        if self.events_enabled and keys and group == 0:
            with self._lock:
                for k in keys:
                    self._stored[k] = 1

    # ------------------------------------------------------------------ loads

    def start_load(self, meta: KVStrataMetadata, per_layer_hooks: bool = True) -> None:
        """Every step's first hook (start_load_kv), with or without a forward pass: it also
        takes the step's delayed frees, which wait_for_save (skipped by steps without a
        forward pass) must not be the only one to see. per_layer_hooks: False when the
        forward pass will not call wait_for_layer_load (one full CUDA graph)."""
        with self._lock:
            self._delayed |= meta.delayed_frees
            self._step = meta.step
        if meta.new_blocks and self._window_stores:
            self._flush_window_stores(meta.new_blocks)
        retries = self._due_retries(meta.finished)
        # On a GPU a step's same-step loads are one layer-wise job; the rest load one by one.
        layered: List[RequestTransfer] = []
        single: List[RequestTransfer] = []
        for r in meta.loads:
            (layered if r.sync and self.mode == "cuda" else single).append(r)
        if layered:
            self._load_layered(layered, wait_all=not per_layer_hooks)
        for req in retries + single:
            try:
                if self.mode == "host":
                    self._load_host(req)
                elif self.mode == "cuda":
                    self._load_cuda(req)
                else:
                    self._fail_load(req, list(range(len(req.units))))
            except Exception as err:  # noqa: BLE001 - a failed load is a recompute
                log.warning("kvstrata_vllm: load for %s failed: %s (recomputing)", req.req_id, err)
                self._fail_load(req, list(range(len(req.units))))

    def _fail_load(self, req: RequestTransfer, unit_indices: List[int]) -> None:
        with self._lock:
            self._fail_load_locked(req, unit_indices)

    def _fail_load_locked(self, req: RequestTransfer, unit_indices: List[int]) -> None:
        """REQUIRES: self._lock. The units failed: retried later (retry_failed_loads), else
        their blocks are invalid and the request failed."""
        if self.retry_failed_loads and not req.sync:
            if self._retries.add(req, unit_indices):
                self.stats.add("load_retried_units", len(unit_indices))
                return
            log.error("kvstrata_vllm: the load for %s still fails after its retries; this vLLM "
                      "takes a hybrid model's failed load only as block ids, which its "
                      "scheduler cannot map to requests (vLLM >= 0.27 takes it per request)",
                      req.req_id)
        for i in unit_indices:
            self._invalid.update(b for b in req.units[i].block_ids if b >= 0)
        if not req.sync:
            self._failed_recv.add(req.req_id)  # reported by get_finished
        self.stats.add("load_failed_units", len(unit_indices))

    def _due_retries(self, finished: Set[str]) -> List[RequestTransfer]:
        """The queued load retries that are due; those of finished requests are dropped
        (their blocks may be handed out again) and the requests reported received."""
        with self._lock:
            due, dropped = self._retries.due(finished)
            self._recved |= dropped
        return due

    def _load_layered(self, reqs: List[RequestTransfer], wait_all: bool) -> None:
        """One layer-wise job for all of this step's same-step loads (see the module doc)."""
        keys = [u.key for r in reqs for u in r.units]
        ids = [u.block_ids[0] for r in reqs for u in r.units]
        s, ns = self.session_and_ns()
        reg = self.reg
        job = None
        if s is not None and ns is not None and reg is not None and reg.layer_flags is not None:
            value = reg.layer_flags.next_value()
            # One request's load consumes its lookup's lease (several: the scheduler keeps
            # theirs, see KVStrataScheduler._hand_leases).
            lease = self._take_lease(reqs[0]) if len(reqs) == 1 else 0
            t0 = time.monotonic()
            job = self.link.guard("submit_load", lambda: s.submit_load(
                ns, reg, keys, ids, lease_id=lease, layer_flag_value=value), None)
            trace.event("load_submit", reqs[0].req_id, ms=round((time.monotonic() - t0) * 1e3, 3),
                        units=len(ids), layered=len(reqs))
        if job is None:
            with self._lock:
                self._invalid.update(ids)
            self.stats.add("load_failed_units", len(ids))
            return
        self._sync_job = (job, ids, [r.req_id for r in reqs], value)
        self._marks.mark("submitted")
        self._sync_waited = set()
        self._sync_waited_all = wait_all
        self._gpu_waits = 0
        # A load that already failed as a whole (e.g. nothing was in L1 any more) never
        # writes the flags: _landed lets the forward pass through now, not in get_finished.
        self._sync_done = None
        self._landed()
        if wait_all:
            # No per-layer hook will run: the stream waits for every layer before the graph
            # -- unless the job landed meanwhile (a small load can land before the 32nd of
            # these driver calls).
            for layer in reg.layer_flags.layers:
                if self._landed():
                    break
                reg.layer_flags.wait(layer, value)
                self._gpu_waits += 1

    def wait_layer(self, layer_name: str) -> None:
        """wait_for_layer_load: the current stream waits (on the GPU) for this layer -- until
        the job's completion is here: then every layer has landed (the daemon reports a job
        once all its copies finished) and the later layers need no wait, each of which costs
        the forward pass's thread a driver call (cuStreamWaitValue64)."""
        if trace.enabled():
            if not self._hooks:
                self._clock = trace.thread_clock()
            self._hooks.append(time.monotonic())
        if self._sync_job is None or self.reg is None or self.reg.layer_flags is None:
            return
        layer = self._layer_of.get(layer_name, 0)
        if not self._landed():
            try:
                self.reg.layer_flags.wait(layer, self._sync_job[3])
            except Exception as err:  # noqa: BLE001 - unwaited: the job counts as failed
                if not self._warned_hooks:
                    self._warned_hooks = True
                    log.warning("kvstrata_vllm: waiting for a layer-wise load: %s", err)
                return
            self._gpu_waits += 1
        if trace.enabled() and (not self._sync_waited or layer == len(self._layer_of) - 1):
            name = "wait_last" if self._sync_waited else "wait0"
            trace.event(name, self._sync_job[2][0], layer=layer, gpu_waits=self._gpu_waits)
            self._marks.mark(name)
        self._sync_waited.add(layer)

    def _landed(self) -> bool:
        """Whether the step's layer-wise load has completed without a failed block (its
        completion taken from the session's stream, the others' handed on)."""
        done = self._sync_done
        if done is None:
            s = self.link.current
            early = self.link.guard("take_completions", s.take_completions, {}) if s else {}
            if not early:
                return False
            done = self._sync_done = early.pop(self._sync_job[0], None)
            self._complete(early)
            if done is None:
                return False
            if failed_indices(done, len(self._sync_job[1])) and self.reg is not None and \
                    self.reg.layer_flags is not None:
                # A job that failed as a whole, was refused after its submit returned (the
                # answer comes later) or lost blocks: words it never writes must not hold
                # the stream until get_finished.
                self.reg.layer_flags.release(self._sync_job[3])
        return not failed_indices(done, len(self._sync_job[1]))

    def _finish_layered(self) -> None:
        """The step's layer-wise load is over: its failed blocks become invalid."""
        job, ids, req_ids, value = self._sync_job
        self._sync_job = None
        trace.event("finish", req_ids[0])
        flags = self.reg.layer_flags if self.reg is not None else None
        layers = len(flags) if flags is not None else 0
        unwaited = not self._sync_waited_all and len(self._sync_waited) < layers
        if unwaited and not self._warned_hooks:
            self._warned_hooks = True
            log.warning("kvstrata_vllm: the forward pass read %d of %d layers without "
                        "wait_for_layer_load; those loads count as failed (recomputed)",
                        layers - len(self._sync_waited), layers)
        s = self.link.current
        done, self._sync_done = self._sync_done, None
        if done is None and s is not None:
            try:
                done = s.wait_jobs([job], timeout=max(self.cfg.timeout_s, 5.0)).get(job)
            except (TimeoutError, kvstrata.KVStrataError) as err:
                log.warning("kvstrata_vllm: layer-wise load: %s (recomputing)", err)
        failed = set(range(len(ids))) if done is None or unwaited else \
            failed_indices(done, len(ids))
        if (done is None or failed) and flags is not None:
            flags.release(value)  # Words the daemon never wrote must not stall the stream.
        with self._lock:
            self._invalid.update(ids[i] for i in failed)
        self.stats.add("loaded_units", len(ids) - len(failed))
        self.stats.add("load_failed_units", len(failed))
        if not failed:
            with self._lock:
                self._timed_locked(tuple(req_ids), done)
        for req_id in req_ids:
            trace.event("load_done", req_id, failed=len(failed),
                        daemon_ms=round(getattr(done, "elapsed_us", 0) / 1e3, 3))
        self._marks.end(req_ids[0])

    def _load_host(self, req: RequestTransfer) -> None:
        host = self.hosts[req.group]
        torch = host.torch
        s, ns = self.session_and_ns(req.group)
        n = len(req.units)
        if s is None or ns is None:
            self._fail_load(req, list(range(n)))
            return
        rows = torch.empty((n, ns.bytes_per_block), dtype=torch.uint8)
        keys = [u.key for u in req.units]
        lease = self._take_lease(req)
        t0 = time.monotonic()
        found = self.link.guard("load", lambda: s.load(ns, keys, out=list(rows), lease_id=lease),
                                None)
        if found is None and lease:  # e.g. the lease expired first (NOT_FOUND): without it
            found = self.link.guard("load", lambda: s.load(ns, keys, out=list(rows)), None)
        if found is not None and all(found):
            with self._lock:
                self._load_ms.append(((req.req_id,), (time.monotonic() - t0) * 1e3))
        if found is None:
            self._fail_load(req, list(range(n)))
            return
        ok = [i for i in range(n) if found[i]]
        block_rows = rows.view(n * self.blocks_per_unit, host.block_bytes)
        ids, picks = [], []
        for i in ok:
            for j, b in enumerate(req.units[i].block_ids):
                if b >= 0:
                    ids.append(b)
                    picks.append(i * self.blocks_per_unit + j)
        if ids:
            host.scatter(ids, block_rows[torch.tensor(picks, dtype=torch.long)])
        self.stats.add("loaded_units", len(ok))
        self.stats.add("loaded_bytes", len(ok) * ns.bytes_per_block)
        missing = [i for i in range(n) if not found[i]]
        if missing:
            self._fail_load(req, missing)
        if not req.sync:
            with self._lock:
                self._recved.add(req.req_id)  # reported once no retry of it is queued

    def _take_lease(self, req: RequestTransfer) -> int:
        """The lease the scheduler's lookup took on this rank's namespace of req's group, for
        this load to consume; 0 when there is none (or a retry: the first attempt took it)."""
        return req.leases.pop(self.tp_rank, 0) if req.leases else 0

    def _load_cuda(self, req: RequestTransfer) -> None:
        s, ns = self.session_and_ns(req.group)
        reg = self.regs.get(req.group)
        if s is None or ns is None or reg is None:
            self._fail_load(req, list(range(len(req.units))))
            return
        keys = [u.key for u in req.units]
        ids = [u.block_ids[0] for u in req.units]
        lease = self._take_lease(req)
        t0 = time.monotonic()
        job = self.link.guard("submit_load", lambda: s.submit_load(ns, reg, keys, ids,
                                                                   lease_id=lease), None)
        trace.event("load_submit", req.req_id, ms=round((time.monotonic() - t0) * 1e3, 3),
                    units=len(ids))
        if job is None:
            self._fail_load(req, list(range(len(req.units))))
            return
        with self._lock:
            self._jobs[job] = ("load", req.req_id, ids, keys)
            self._req_jobs.setdefault(("load", req.req_id), set()).add(job)
            if self.retry_failed_loads:
                self._load_reqs[job] = req

    # ------------------------------------------------------------------ stores

    def save(self, meta: KVStrataMetadata) -> None:
        """Called from wait_for_save: this step's forward pass has written meta.stores."""
        if self._hooks:
            trace.hook_gaps(self._hooks, time.monotonic(), self._clock)
            self._hooks = []
        if self._sync_job is not None and trace.enabled():
            trace.event("save", self._sync_job[2][0])
            self._marks.mark("fwd_end")
        # An MLA group's units are stored by rank 0 only (KvGroup.replicated).
        stores = [r for r in meta.stores
                  if self.tp_rank == 0 or not self.groups[r.group].replicated]
        if not stores:
            return
        if self.mode == "host":
            self._save_host(stores)
        elif self.mode == "cuda":
            self._save_cuda(stores)
        else:
            self.stats.add("store_dropped_units", sum(len(r.units) for r in stores))

    def _save_host(self, stores: List[RequestTransfer]) -> None:
        assert self.store_thread is not None
        for group, host in self.hosts.items():
            keys: List[bytes] = []
            ids: List[int] = []
            for req in stores:
                if req.group == group:
                    for u in req.units:
                        keys.append(u.key)
                        ids.extend(u.block_ids)
            if not keys:
                continue
            # Unreachable daemon or a full queue: no copy, a miss later (counted).
            if self.link.session() is None or \
                    not self.store_thread.fits(len(ids) * host.block_bytes):
                self.stats.add("store_dropped_units", len(keys))
                continue
            rows = host.gather(ids).view(len(keys), -1)
            if not self.store_thread.submit(keys, rows, group):
                self.stats.add("store_dropped_units", len(keys))

    def _save_cuda(self, stores: List[RequestTransfer]) -> None:
        events: Dict[int, Any] = {}  # one IPC event per group's registration
        for req in stores:
            s, ns = self.session_and_ns(req.group)
            reg = self.regs.get(req.group)
            if s is None or ns is None or reg is None:
                self.stats.add("store_dropped_units", len(req.units))
                continue
            if req.group not in events:
                events[req.group] = self.link.guard("record_event", reg.record_event, None)
            event = events[req.group]
            keys = [u.key for u in req.units]
            ids = [u.block_ids[0] for u in req.units]
            t0 = time.monotonic()
            job = self.link.guard("submit_store", lambda: s.submit_store(
                ns, reg, keys, ids, event=event if event is not None else True), None)
            trace.event("store_submit", req.req_id, ms=round((time.monotonic() - t0) * 1e3, 3),
                        units=len(ids))
            if job is None:
                self.stats.add("store_dropped_units", len(keys))
                continue
            with self._lock:
                # Group 0's keys speak for every group in the KV events.
                self._jobs[job] = ("store", req.req_id, ids, keys if req.group == 0 else [])
                self._req_jobs.setdefault(("store", req.req_id), set()).add(job)
                if self.groups[req.group].sliding_window:
                    self._window_stores[job] = set(ids)

    def _flush_window_stores(self, new_blocks: Set[int]) -> None:
        """Wait for the stores still reading a sliding-window block that this step hands out
        again (before the forward pass writes it); cancelled after store_timeout_s."""
        with self._lock:
            jobs = [j for j, ids in self._window_stores.items() if not ids.isdisjoint(new_blocks)]
        s = self.link.session()
        if not jobs or s is None:
            return
        self.stats.add("window_store_waits", len(jobs))
        try:
            done = s.wait_jobs(jobs, timeout=self.cfg.store_timeout_s)
        except (TimeoutError, kvstrata.KVStrataError) as err:
            log.warning("kvstrata_vllm: stores of reused sliding-window blocks: %s; cancelling",
                        err)
            for j in jobs:
                self.link.guard("cancel_job", lambda j=j: s.cancel_job(j), None)
            done = {}
        self._complete(done)

    def handle_preemptions(self, meta: KVStrataMetadata) -> None:
        """Preempted requests' blocks are about to be reused: their stores must be done."""
        if self.mode != "cuda" or not meta.preempted:
            return
        with self._lock:
            jobs = [j for r in meta.preempted for j in self._req_jobs.get(("store", r), ())]
        s = self.link.session()
        if jobs and s is not None:
            try:
                done = s.wait_jobs(jobs, timeout=self.cfg.store_timeout_s)
            except (TimeoutError, kvstrata.KVStrataError) as err:
                log.warning("kvstrata_vllm: stores of preempted requests: %s; cancelling", err)
                for j in jobs:
                    self.link.guard("cancel_job", lambda j=j: s.cancel_job(j), None)
                done = {}
            self._complete(done)

    # ------------------------------------------------------------------ completions

    def _complete(self, completions: Dict[int, Any]) -> None:
        with self._lock:
            for job_id, c in completions.items():
                info = self._jobs.pop(job_id, None)
                self._window_stores.pop(job_id, None)
                if info is None:
                    continue
                kind, req_id, ids, keys = info
                failed = failed_indices(c, len(ids))
                if kind == "load":
                    req = self._load_reqs.pop(job_id, None)
                    if failed and req is not None:
                        self._fail_load_locked(req, sorted(failed))
                    elif failed:
                        self._invalid.update(ids[i] for i in failed)
                        self._failed_recv.add(req_id)
                        self.stats.add("load_failed_units", len(failed))
                    self.stats.add("loaded_units", len(ids) - len(failed))
                    if not failed:
                        self._timed_locked((req_id,), c)
                else:
                    self.stats.add("stored_units", len(ids) - len(failed))
                    self.stats.add("store_failed_units", len(failed))
                    if self.events_enabled:
                        for i, k in enumerate(keys):
                            if i not in failed:
                                self._stored[k] = 1
                jobs = self._req_jobs.get((kind, req_id))
                if jobs is not None:
                    jobs.discard(job_id)
                    if not jobs:
                        del self._req_jobs[(kind, req_id)]
                        if kind == "load":
                            self._recved.add(req_id)  # once no retry of it is queued
                            trace.event("load_done", req_id, failed=len(failed))

    def get_finished(self, finished_req_ids: Set[str]) -> Tuple[Optional[Set[str]], Optional[Set[str]]]:
        if self._sync_job is not None:
            self._finish_layered()
        if self.mode == "cuda" and self._jobs:
            s = self.link.current
            if s is not None:
                self._complete(self.link.guard("take_completions", s.take_completions, {}))
        with self._lock:
            failed = {r for r in self._failed_recv if ("load", r) not in self._req_jobs}
            self._failed_recv -= failed
            if self.per_request_failures:
                self._failed_reported |= failed
            recved = self._recved | failed
            if self._retries:  # a request with a queued retry is still receiving
                waiting = self._retries.waiting()
                self._recved, recved = recved & waiting, recved - waiting
            else:
                self._recved = set()
            self._retries.forget(recved)
            sent = {r for r in self._delayed if ("store", r) not in self._req_jobs}
            self._delayed -= sent
        return (sent or None), (recved or None)

    def take_invalid(self) -> Set[int]:
        with self._lock:
            invalid, self._invalid = self._invalid, set()
        return invalid

    def take_failed_recving(self) -> Set[str]:
        """Requests whose asynchronous load failed, reported finished receiving in the same
        get_finished (a hybrid model's: vLLM recomputes them whole)."""
        with self._lock:
            failed, self._failed_reported = self._failed_reported, set()
        return failed

    def _timed_locked(self, req_ids: Tuple[str, ...], completion: Any) -> None:
        """REQUIRES: self._lock. A load job's time as the daemon measured it, for the
        scheduler's planner (KVStrataWorkerMetadata.loads)."""
        us = getattr(completion, "elapsed_us", 0) or 0
        if us > 0:
            self._load_ms.append((req_ids, us / 1e3))

    def worker_meta(self) -> Optional[KVStrataWorkerMetadata]:
        with self._lock:
            stored, self._stored = self._stored, {}
            loads, self._load_ms = self._load_ms, []
            step, self._step = self._step, 0
        return KVStrataWorkerMetadata(stored, loads, step) if stored or loads or step else None

    def shutdown(self) -> None:
        if self.store_thread is not None:
            self.store_thread.stop(self.cfg.store_timeout_s)
        s = self.link.current
        if self.mode == "cuda" and self._jobs and s is not None:
            try:
                s.wait_jobs(list(self._jobs), timeout=self.cfg.store_timeout_s)
            except (TimeoutError, kvstrata.KVStrataError) as err:
                log.warning("kvstrata_vllm: shutdown with unfinished jobs: %s", err)
        self.link.close()


def _ns_key(group: int) -> Any:
    """The Link's key of a KV cache group's namespace ("ns" for group 0)."""
    return "ns" if group == 0 else ("ns", group)
