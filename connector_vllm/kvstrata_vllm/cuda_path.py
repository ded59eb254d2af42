"""CudaPath: the DataPath of CUDA KV caches. The tensors are registered with the daemon through
CUDA IPC; stores are jobs that wait for an IPC event recorded after the forward pass; loads
are jobs; the completions arrive on the session's completion stream. One unit = one vLLM
block here (the daemon copies engine blocks one to one).

Loads in the step that uses them (RequestTransfer.sync, config load_mode): all of a step's
are one layer-wise job, submitted in start_load_kv; the daemon writes the job's value into
a per-layer GPU word once that layer's copies landed, and wait_for_layer_load makes the
forward pass's stream wait for its layer's word (cuStreamWaitValue64: no CPU wait) --
until the job's completion has arrived (every layer landed): the later layers skip the
driver call. When the forward pass runs as one full CUDA graph (no per-layer hook),
start_load_kv waits for every layer instead; a layer whose hook never ran makes the whole
job count as failed. get_finished waits for the job's completion, so its failed blocks
reach vLLM in the same step (vLLM then discards the step's output for those requests and
recomputes); words the daemon did not write are written here, so the stream never waits
forever.

Hybrid models: each KV cache group has a registration of its own (vLLM's hybrid allocator
lets layers of different groups share one tensor: the daemon opens such memory once); their
loads are asynchronous (the layer-wise load serves one group), and a store that still reads
a sliding-window block vLLM hands out again (KVStrataMetadata.new_blocks) is waited for
before the step's forward pass.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

import kvstrata

from .kv_layouts import CROSS_LAYER, layer_names
from .metadata import KVStrataMetadata, RequestTransfer
from .namespace import KvGroup
from .worker_book import WorkerBook
from . import trace

log = logging.getLogger("kvstrata_vllm")


def failed_indices(completion: Any, count: int) -> Set[int]:
    """The job indices a JobCompletion reports failed; every one of the `count` when the
    job failed without naming blocks."""
    failed = set(completion.failed_blocks)
    return failed if completion.ok or failed else set(range(count))


class CudaPath:
    mode = "cuda"
    layer_wise = True

    def __init__(self, book: WorkerBook, kv_caches: Any, layout: str,
                 pieces_of: Callable[[KvGroup], Any]) -> None:
        """pieces_of(group): the TensorPieces of a group's KV caches, to register."""
        self.book = book
        self.pieces_of = pieces_of
        self.regs: Dict[int, kvstrata.CudaRegistration] = {}  # per KV cache group
        # vLLM layer name -> registered layer number
        self.layer_of: Dict[str, int] = {}
        if isinstance(kv_caches, dict) and layout != CROSS_LAYER:
            self.layer_of = {str(n): i for i, n in enumerate(layer_names(kv_caches))}
        # Guarded by book.lock: job id -> (kind, request id, block ids, keys)
        self._jobs: Dict[int, Tuple[str, str, List[int], List[bytes]]] = {}
        self._req_jobs: Dict[Tuple[str, str], Set[int]] = {}
        # Stores of sliding-window groups in flight: job id -> the blocks they read.
        self._window_stores: Dict[int, Set[int]] = {}
        self._load_reqs: Dict[int, RequestTransfer] = {}    # async load job -> its transfer
        # Guarded by book.lock: a request's asynchronous loads so far (a hybrid model's: one
        # job per KV cache group, running side by side): the slowest job's daemon time in
        # µs, or None once one of them failed. Timed once the last one completed.
        self._load_us: Dict[str, Optional[int]] = {}
        # This step's layer-wise load: (job id, block ids, request ids, flag value), its
        # completion if it came early, and the layers waited.
        self._sync_job: Optional[Tuple[int, List[int], List[str], int]] = None
        self._sync_done: Any = None
        self._sync_waited: Set[int] = set()
        self._sync_waited_all = False
        self._gpu_waits = 0  # stream waits this layer-wise load issued (before it landed)
        self._warned_hooks = False
        self._marks = trace.GpuMarks()  # the trace's GPU timeline of layer-wise loads

    @property
    def reg(self) -> Optional[kvstrata.CudaRegistration]:
        """The first KV cache group's registration (the layer-wise load serves it)."""
        return self.regs.get(0)

    def registered(self, s: kvstrata.Session, group: KvGroup,
                   ns: kvstrata.RegisteredNamespace) -> None:
        if group.index in self.regs:
            return
        try:
            self.regs[group.index] = s.register_cuda_kv_caches(
                ns, self.pieces_of(group), layer_flags=len(self.book.groups) == 1)
        except (ValueError, TypeError) as err:  # The tensors do not fit: not transient.
            raise ValueError(f"registering the CUDA KV caches: {err}") from err

    def start_step(self, meta: KVStrataMetadata) -> None:
        if meta.new_blocks and self._window_stores:
            self._flush_window_stores(meta.new_blocks)

    # ------------------------------------------------------------------ loads

    def load(self, req: RequestTransfer) -> None:
        book = self.book
        s, ns = book.session_and_ns(req.group)
        reg = self.regs.get(req.group)
        if s is None or ns is None or reg is None:
            book.fail_load(req, list(range(len(req.units))))
            return
        keys = [u.key for u in req.units]
        ids = [u.block_ids[0] for u in req.units]
        lease = book.take_lease(req)
        t0 = time.monotonic()
        job = book.link.guard("submit_load", lambda: s.submit_load(ns, reg, keys, ids,
                                                                   lease_id=lease), None)
        trace.event("load_submit", req.req_id, ms=round((time.monotonic() - t0) * 1e3, 3),
                    units=len(ids))
        if job is None:
            book.fail_load(req, list(range(len(req.units))))
            return
        with book.lock:
            self._jobs[job] = ("load", req.req_id, ids, keys)
            self._req_jobs.setdefault(("load", req.req_id), set()).add(job)
            if book.retry_failed_loads:
                self._load_reqs[job] = req

    def load_layer_wise(self, reqs: List[RequestTransfer], wait_all: bool) -> None:
        """One layer-wise job for all of this step's same-step loads (see the module doc)."""
        book = self.book
        keys = [u.key for r in reqs for u in r.units]
        ids = [u.block_ids[0] for r in reqs for u in r.units]
        s, ns = book.session_and_ns()
        reg = self.reg
        job = None
        if s is not None and ns is not None and reg is not None and reg.layer_flags is not None:
            value = reg.layer_flags.next_value()
            # One request's load consumes its lookup's lease (several: the scheduler keeps
            # theirs, see KVStrataScheduler._hand_leases).
            lease = book.take_lease(reqs[0]) if len(reqs) == 1 else 0
            t0 = time.monotonic()
            job = book.link.guard("submit_load", lambda: s.submit_load(
                ns, reg, keys, ids, lease_id=lease, layer_flag_value=value), None)
            trace.event("load_submit", reqs[0].req_id, ms=round((time.monotonic() - t0) * 1e3, 3),
                        units=len(ids), layered=len(reqs))
        if job is None:
            with book.lock:
                book.invalid.update(ids)
            book.stats.add("load_failed_units", len(ids))
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
        """The current stream waits (on the GPU) for this layer -- until the job's completion
        is here: then every layer has landed (the daemon reports a job once all its copies
        finished) and the later layers need no wait, each of which costs the forward pass's
        thread a driver call (cuStreamWaitValue64)."""
        if self._sync_job is None or self.reg is None or self.reg.layer_flags is None:
            return
        layer = self.layer_of.get(layer_name, 0)
        if not self._landed():
            try:
                self.reg.layer_flags.wait(layer, self._sync_job[3])
            except Exception as err:  # noqa: BLE001 - unwaited: the job counts as failed
                if not self._warned_hooks:
                    self._warned_hooks = True
                    log.warning("kvstrata_vllm: waiting for a layer-wise load: %s", err)
                return
            self._gpu_waits += 1
        if trace.enabled() and (not self._sync_waited or layer == len(self.layer_of) - 1):
            name = "wait_last" if self._sync_waited else "wait0"
            trace.event(name, self._sync_job[2][0], layer=layer, gpu_waits=self._gpu_waits)
            self._marks.mark(name)
        self._sync_waited.add(layer)

    def _landed(self) -> bool:
        """Whether the step's layer-wise load has completed without a failed block (its
        completion taken from the session's stream, the others' handed on)."""
        done = self._sync_done
        if done is None:
            s = self.book.link.current
            early = self.book.link.guard("take_completions", s.take_completions, {}) if s else {}
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
        book = self.book
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
        s = book.link.current
        done, self._sync_done = self._sync_done, None
        if done is None and s is not None:
            try:
                done = s.wait_jobs([job], timeout=max(book.cfg.timeout_s, 5.0)).get(job)
            except (TimeoutError, kvstrata.KVStrataError) as err:
                log.warning("kvstrata_vllm: layer-wise load: %s (recomputing)", err)
        failed = set(range(len(ids))) if done is None or unwaited else \
            failed_indices(done, len(ids))
        if (done is None or failed) and flags is not None:
            flags.release(value)  # Words the daemon never wrote must not stall the stream.
        with book.lock:
            book.invalid.update(ids[i] for i in failed)
        book.stats.add("loaded_units", len(ids) - len(failed))
        book.stats.add("load_failed_units", len(failed))
        if not failed:
            with book.lock:
                book.timed_locked(tuple(req_ids), done)
        for req_id in req_ids:
            trace.event("load_done", req_id, failed=len(failed),
                        daemon_ms=round(getattr(done, "elapsed_us", 0) / 1e3, 3))
        self._marks.end(req_ids[0])

    # ------------------------------------------------------------------ stores

    def save(self, stores: List[RequestTransfer]) -> None:
        book = self.book
        if self._sync_job is not None and trace.enabled():
            trace.event("save", self._sync_job[2][0])
            self._marks.mark("fwd_end")
        events: Dict[int, Any] = {}  # one IPC event per group's registration
        for req in stores:
            s, ns = book.session_and_ns(req.group)
            reg = self.regs.get(req.group)
            if s is None or ns is None or reg is None:
                book.stats.add("store_dropped_units", len(req.units))
                continue
            if req.group not in events:
                events[req.group] = book.link.guard("record_event", reg.record_event, None)
            event = events[req.group]
            keys = [u.key for u in req.units]
            ids = [u.block_ids[0] for u in req.units]
            t0 = time.monotonic()
            job = book.link.guard("submit_store", lambda: s.submit_store(
                ns, reg, keys, ids, event=event if event is not None else True), None)
            trace.event("store_submit", req.req_id, ms=round((time.monotonic() - t0) * 1e3, 3),
                        units=len(ids))
            if job is None:
                book.stats.add("store_dropped_units", len(keys))
                continue
            with book.lock:
                # Group 0's keys speak for every group in the KV events.
                self._jobs[job] = ("store", req.req_id, ids, keys if req.group == 0 else [])
                self._req_jobs.setdefault(("store", req.req_id), set()).add(job)
                if book.groups[req.group].sliding_window:
                    self._window_stores[job] = set(ids)

    def _flush_window_stores(self, new_blocks: Set[int]) -> None:
        """Wait for the stores still reading a sliding-window block that this step hands out
        again (before the forward pass writes it)."""
        with self.book.lock:
            jobs = [j for j, ids in self._window_stores.items() if not ids.isdisjoint(new_blocks)]
        s = self.book.link.session()
        if not jobs or s is None:
            return
        self.book.stats.add("window_store_waits", len(jobs))
        self._wait_stores(s, jobs, "stores of reused sliding-window blocks")

    def handle_preemptions(self, meta: KVStrataMetadata) -> None:
        if not meta.preempted:
            return
        with self.book.lock:
            jobs = [j for r in meta.preempted for j in self._req_jobs.get(("store", r), ())]
        s = self.book.link.session()
        if jobs and s is not None:
            self._wait_stores(s, jobs, "stores of preempted requests")

    def _wait_stores(self, s: kvstrata.Session, jobs: List[int], what: str) -> None:
        """Wait for these store jobs; cancelled after store_timeout_s."""
        try:
            done = s.wait_jobs(jobs, timeout=self.book.cfg.store_timeout_s)
        except (TimeoutError, kvstrata.KVStrataError) as err:
            log.warning("kvstrata_vllm: %s: %s; cancelling", what, err)
            for j in jobs:
                self.book.link.guard("cancel_job", lambda j=j: s.cancel_job(j), None)
            done = {}
        self._complete(done)

    # ------------------------------------------------------------------ completions

    def _complete(self, completions: Dict[int, Any]) -> None:
        book = self.book
        with book.lock:
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
                        book.fail_load_locked(req, sorted(failed))
                    elif failed:
                        book.invalid.update(ids[i] for i in failed)
                        book.failed_recv.add(req_id)
                        book.stats.add("load_failed_units", len(failed))
                    book.stats.add("loaded_units", len(ids) - len(failed))
                    us = self._load_us.get(req_id, 0)
                    self._load_us[req_id] = None if failed or us is None else \
                        max(us, getattr(c, "elapsed_us", 0) or 0)
                else:
                    book.stats.add("stored_units", len(ids) - len(failed))
                    book.stats.add("store_failed_units", len(failed))
                    if book.events_enabled:
                        for i, k in enumerate(keys):
                            if i not in failed:
                                book.stored[k] = 1
                jobs = self._req_jobs.get((kind, req_id))
                if jobs is not None:
                    jobs.discard(job_id)
                    if not jobs:
                        del self._req_jobs[(kind, req_id)]
                        if kind == "load":
                            book.recved.add(req_id)  # once no retry of it is queued
                            trace.event("load_done", req_id, failed=len(failed))
                            us = self._load_us.pop(req_id, None)
                            if us:  # the request's load time, for the scheduler's planner
                                book.load_ms.append(((req_id,), us / 1e3))

    def wait_loads(self, timeout: float) -> None:
        """Wait up to `timeout` s for the asynchronous load jobs in flight (a step without a
        forward pass: nothing else waits for this worker). Those still running are left to
        a later step; the completions that arrived meanwhile are taken here or by poll."""
        with self.book.lock:
            jobs = [j for j, info in self._jobs.items() if info[0] == "load"]
        s = self.book.link.current
        if not jobs or s is None:
            return
        t0 = time.monotonic()
        try:
            done = s.wait_jobs(jobs, timeout=timeout)
        except (TimeoutError, kvstrata.KVStrataError):
            return  # Still loading (poll takes what arrived), or the session is gone.
        trace.event("load_wait", "", ms=round((time.monotonic() - t0) * 1e3, 3), jobs=len(jobs))
        self._complete(done)

    def poll(self) -> None:
        if self._sync_job is not None:
            self._finish_layered()
        if self.book.enabled and self._jobs:
            s = self.book.link.current
            if s is not None:
                self._complete(self.book.link.guard("take_completions", s.take_completions, {}))

    def busy_locked(self, kind: str, req_id: str) -> bool:
        return (kind, req_id) in self._req_jobs

    def drain(self, timeout: float) -> bool:
        return True  # The daemon's jobs: get_finished reports their requests.

    def shutdown(self) -> None:
        s = self.book.link.current
        if self.book.enabled and self._jobs and s is not None:
            try:
                s.wait_jobs(list(self._jobs), timeout=self.book.cfg.store_timeout_s)
            except (TimeoutError, kvstrata.KVStrataError) as err:
                log.warning("kvstrata_vllm: shutdown with unfinished jobs: %s", err)
