"""What a worker's two data paths (host_path.py, cuda_path.py) share and report to: the link
to the daemon, the stats, and the record of what the loads and stores did -- blocks that
failed to load, requests finished receiving or sending, queued load retries, the keys
stored (KV events) and the load times (the scheduler's planner).

Thread safety: every record here is guarded by `lock`, and so are a data path's own job
tables (a completion updates both at once). Methods named ..._locked REQUIRE `lock`
held; the others take it themselves.
"""
from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

import kvstrata

from .config import ConnectorConfig
from .load_retries import VLLM_FAILED_RECVING, LoadRetries
from .metadata import KVStrataMetadata, KVStrataWorkerMetadata, RequestTransfer
from .namespace import KvGroup
from .stats import StatsCounter

log = logging.getLogger("kvstrata_vllm")


def ns_key(group: int) -> Any:
    """The Link's key of a KV cache group's namespace ("ns" for group 0)."""
    return "ns" if group == 0 else ("ns", group)


class WorkerBook:
    def __init__(self, cfg: ConnectorConfig, link: kvstrata.DaemonLink, groups: List[KvGroup],
                 rank: int, events_enabled: bool) -> None:
        """rank: the worker's rank in the engine (stages.Ranks: pp_rank * tp_size + tp_rank),
        the key of the leases its loads consume."""
        self.cfg = cfg
        self.link = link
        self.groups = groups
        self.rank = rank
        self.events_enabled = events_enabled
        self.stats = StatsCounter()
        # Whether a data path serves this worker: False before registration and once the
        # worker is disabled (session_and_ns then answers nothing).
        self.enabled = False
        self.lock = threading.Lock()
        self.invalid: Set[int] = set()     # blocks that failed to load, for vLLM
        self.recved: Set[str] = set()      # requests finished receiving
        self.delayed: Set[str] = set()     # finished requests whose stores hold their blocks
        self.stored: Dict[bytes, int] = {}  # keys stored, for the KV events
        self.load_ms: List[Tuple[Tuple[str, ...], float]] = []  # loads timed
        self.step = 0  # the scheduler's number of the step running (KVStrataMetadata.step)
        # Requests whose asynchronous load failed in part: finished receiving once none of
        # their other loads (a hybrid model's other groups) is in flight.
        self.failed_recv: Set[str] = set()
        # A hybrid model's failed loads, reported per request (take_failed_recving): vLLM
        # cannot map block ids back to requests when they repeat across groups.
        self.per_request_failures = len(groups) > 1
        self.failed_reported: Set[str] = set()
        # vLLM 0.26 and a hybrid model: failed loads are retried (the data is pinned by the
        # lookup's lease; a daemon restart keeps it in L2), the request waiting meanwhile.
        self.retry_failed_loads = self.per_request_failures and not VLLM_FAILED_RECVING
        self.retries = LoadRetries()
        # Staged loads (staged_loads.py) not over yet: still receiving whatever their parts
        # did; those that waited for units to reach L1 send no time (their parts' times
        # are an L1 copy's; the scheduler's promotion watch times the tier).
        self.staged: Set[str] = set()
        self.untimed: Set[str] = set()
        # Loads that gave up at their deadline: (request id, units landed, units planned,
        # ms waited, the deadline ms), for the scheduler (KVStrataWorkerMetadata.gave_up).
        self.gave_up: List[Tuple[str, int, int, float, float]] = []

    def session_and_ns(self, group: int = 0) -> Tuple[Optional[kvstrata.Session],
                                                      Optional[kvstrata.RegisteredNamespace]]:
        if not self.enabled:
            return None, None
        s = self.link.session()
        if s is None or not self.enabled:
            return None, None
        return s, self.link.namespaces.get(ns_key(group))

    def take_lease(self, req: RequestTransfer) -> int:
        """The lease the scheduler's lookup took on this rank's namespace of req's group, for
        this load to consume; 0 when there is none (or a retry: the first attempt took it)."""
        return req.leases.pop(self.rank, 0) if req.leases else 0

    # ------------------------------------------------------------------ loads

    def start_step(self, meta: KVStrataMetadata) -> None:
        with self.lock:
            self.delayed |= meta.delayed_frees
            self.step = meta.step

    def due_retries(self, finished: Set[str]) -> List[RequestTransfer]:
        """The queued load retries that are due; those of finished requests are dropped
        (their blocks may be handed out again) and the requests reported received."""
        with self.lock:
            due, dropped = self.retries.due(finished)
            self.recved |= dropped
        return due

    def fail_load(self, req: RequestTransfer, unit_indices: List[int],
                  counter: str = "load_failed_units") -> None:
        with self.lock:
            self.fail_load_locked(req, unit_indices, counter)

    def fail_load_locked(self, req: RequestTransfer, unit_indices: List[int],
                         counter: str = "load_failed_units") -> None:
        """The units failed: retried later (retry_failed_loads), else their blocks are
        invalid and the request failed; counted under `counter`."""
        if self.retry_failed_loads and not req.sync:
            if self.retries.add(req, unit_indices):
                self.stats.add("load_retried_units", len(unit_indices))
                return
            log.error("kvstrata_vllm: the load for %s still fails after its retries; this vLLM "
                      "takes a hybrid model's failed load only as block ids, which its "
                      "scheduler cannot map to requests (vLLM >= 0.27 takes it per request)",
                      req.req_id)
        for i in unit_indices:
            self.invalid.update(b for b in req.units[i].block_ids if b >= 0)
        if not req.sync:
            self.failed_recv.add(req.req_id)  # reported by finished()
        self.stats.add(counter, len(unit_indices))

    def time_load(self, req_ids: Tuple[str, ...], ms: float) -> None:
        """A load's time as measured here, for the scheduler's planner (not for a part of a
        staged load that waited: `untimed`)."""
        with self.lock:
            if not self.untimed.intersection(req_ids):
                self.load_ms.append((req_ids, ms))

    def timed_locked(self, req_ids: Tuple[str, ...], completion: Any) -> None:
        """A load job's time as the daemon measured it, for the scheduler's planner
        (KVStrataWorkerMetadata.loads); a staged load's parts are not sent."""
        us = getattr(completion, "elapsed_us", 0) or 0
        if us > 0 and not self.untimed.intersection(req_ids):
            self.load_ms.append((req_ids, us / 1e3))

    # ------------------------------------------------------------------ stores

    def note_stored(self, keys: List[bytes], group: int = 0) -> None:
        """Keys stored, for the KV events: those of group 0 speak for every group."""
        if self.events_enabled and keys and group == 0:
            with self.lock:
                for k in keys:
                    self.stored[k] = 1

    # ------------------------------------------------------------------ reports

    def finished(self, busy_locked: Callable[[str, str], bool]) -> Tuple[Optional[Set[str]],
                                                                         Optional[Set[str]]]:
        """get_finished's answer: (finished sending, finished receiving). busy_locked(kind,
        request id), called under `lock`: whether the data path still has a "load" or
        "store" of that request in flight."""
        with self.lock:
            failed = {r for r in self.failed_recv
                      if not busy_locked("load", r) and r not in self.staged}
            self.failed_recv -= failed
            if self.per_request_failures:
                self.failed_reported |= failed
            recved = self.recved | failed
            # A request with a queued retry or a staged load not over is still receiving.
            waiting = (self.retries.waiting() if self.retries else set()) | self.staged
            self.recved, recved = recved & waiting, recved - waiting
            self.retries.forget(recved)
            sent = {r for r in self.delayed if not busy_locked("store", r)}
            self.delayed -= sent
        return (sent or None), (recved or None)

    def take_invalid(self) -> Set[int]:
        with self.lock:
            invalid, self.invalid = self.invalid, set()
        return invalid

    def take_failed_recving(self) -> Set[str]:
        """Requests whose asynchronous load failed, reported finished receiving in the same
        get_finished (a hybrid model's: vLLM recomputes them whole)."""
        with self.lock:
            failed, self.failed_reported = self.failed_reported, set()
        return failed

    def worker_meta(self) -> Optional[KVStrataWorkerMetadata]:
        with self.lock:
            stored, self.stored = self.stored, {}
            loads, self.load_ms = self.load_ms, []
            step, self.step = self.step, 0
            gave_up, self.gave_up = self.gave_up, []
        if not (stored or loads or step or gave_up):
            return None
        return KVStrataWorkerMetadata(stored, loads, step, gave_up)
