"""Retries of a hybrid model's failed asynchronous loads, for a vLLM that cannot take them.

vLLM 0.26 has no per-request failed receive, and its invalid-block path maps block ids
through one KV cache group (it raises for a model with several). So on such a vLLM the
worker retries a hybrid model's failed load while the request waits in
WAITING_FOR_REMOTE_KVS: the lookup's lease pins the blocks, and a restarted daemon finds
them in L2. Not thread-safe: the worker calls it under its own lock.
"""
from __future__ import annotations

import time
from typing import Dict, List, Set, Tuple

from .metadata import RequestTransfer

try:  # vLLM >= 0.27 takes failed receives per request (KVConnectorTransferResults).
    from vllm.distributed.kv_transfer.kv_connector.v1.base import (  # noqa: F401
        KVConnectorTransferResults as _TransferResults)
    VLLM_FAILED_RECVING = True
except ImportError:  # vLLM 0.26 (or no vLLM: docs, linters)
    VLLM_FAILED_RECVING = False

# A failed load is retried this many times, this far apart, before it is reported.
MAX_LOAD_RETRIES = 20
LOAD_RETRY_DELAY_S = 0.5


class LoadRetries:
    def __init__(self) -> None:
        self._attempts: Dict[str, int] = {}                   # per request
        self._queue: List[Tuple[float, RequestTransfer]] = []  # (due time, units to retry)

    def add(self, req: RequestTransfer, unit_indices: List[int]) -> int:
        """Queue a retry of these units of `req`: the attempt's number, or 0 when the
        request has had MAX_LOAD_RETRIES already (then report the failure)."""
        attempts = self._attempts.get(req.req_id, 0) + 1
        if attempts > MAX_LOAD_RETRIES:
            return 0
        self._attempts[req.req_id] = attempts
        retry = RequestTransfer(req.req_id, [req.units[i] for i in unit_indices],
                                group=req.group)
        self._queue.append((time.monotonic() + LOAD_RETRY_DELAY_S, retry))
        return attempts

    def due(self, finished: Set[str]) -> Tuple[List[RequestTransfer], Set[str]]:
        """(the retries due now, the requests whose retries were dropped because they
        finished: their blocks may be handed out again)."""
        if not self._queue:
            return [], set()
        now = time.monotonic()
        due = [r for t, r in self._queue if t <= now and r.req_id not in finished]
        dropped = {r.req_id for _, r in self._queue if r.req_id in finished}
        self._queue = [(t, r) for t, r in self._queue if t > now and r.req_id not in finished]
        return due, dropped

    def waiting(self) -> Set[str]:
        """Requests with a queued retry: still receiving."""
        return {r.req_id for _, r in self._queue}

    def forget(self, req_ids: Set[str]) -> None:
        """These requests were reported finished receiving."""
        for r in req_ids:
            self._attempts.pop(r, None)

    def __bool__(self) -> bool:
        return bool(self._queue)
