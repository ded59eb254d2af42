"""LeaseReleaser: the scheduler's lease releases, sent by a thread of their own.

A release is a round trip (a release frame on the daemon's fast-path socket, all of a call's
leases at once; ReleaseLease over gRPC where there is none). Most leases never need one: a
worker's load consumes the lease of its namespace. The scheduler releases the others a request's leases while vLLM builds a step or finishes a request
(build_connector_meta, request_finished, update_connector_output, a lookup that found
nothing to load), all on the way to the step's output: each release sent there delays the
step, and a request's first token, by that round trip. By then the leases pin nothing the
workers still need (the load was submitted, or the request is over), so a thread sends
them, in order, while the engine goes on; the daemon frees a lease that is never released
when it expires (lease_ttl_ms) or when the session ends.
"""
from __future__ import annotations

import queue
import threading
from typing import Any, Iterable, List, Optional, Tuple


class LeaseReleaser:
    def __init__(self, link: Any) -> None:
        self.link = link  # the scheduler's kvstrata.DaemonLink (guard: failures are misses)
        self._queue: "queue.SimpleQueue[Optional[Tuple[Any, List[int]]]]" = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: Optional[threading.Thread] = None
        self._closed = False

    def release(self, session: Any, lease_ids: Iterable[int]) -> None:
        """Release these leases of `session` soon, in order, without waiting (after close():
        at once, in this thread)."""
        with self._lock:
            closed = self._closed
            ids = list(lease_ids)
            if not closed and ids:
                self._queue.put((session, ids))
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, daemon=True,
                                                    name="kvstrata-lease-release")
                    self._thread.start()
        if closed and ids:
            self._send(session, ids)

    def _send(self, session: Any, lease_ids: List[int]) -> None:
        self.link.guard("release_lease", lambda: session.release_leases(lease_ids), None)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            self._send(*item)

    def close(self, timeout_s: float = 5.0) -> None:
        """Send what is queued (waiting at most timeout_s), then stop the thread."""
        with self._lock:
            self._closed = True
            thread = self._thread
        if thread is not None:
            self._queue.put(None)
            thread.join(timeout_s)
