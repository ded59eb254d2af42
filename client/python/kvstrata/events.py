"""Events: the KV event batches the daemon published, polled by a kvstrata.Session.

A connector's take_events() hands them on (vLLM's KV events for llm-d); the cursor is kept
per session. The part of kvstrata.Session given its kvstrata.connection.Connection.
"""
from __future__ import annotations

from typing import Any, List, Optional

from .connection import Connection
from .spec import NamespaceArg, namespace_id


class Events:
    """PollEvents of a kvstrata.Session."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._events_next_seq = 0
        self.events_truncated = False

    def poll_events(self, ns: Optional[NamespaceArg] = None, max_batches: int = 0) -> List[Any]:
        """KV event batches (kvstrata.pb.KvEventBatch) published since the previous call,
        optionally only those of namespace `ns`: what a connector's take_events() returns.
        The cursor is kept per session; after a gap (buffer overrun, daemon restart)
        `events_truncated` is True until the next call."""
        nsid = 0 if ns is None else namespace_id(ns)
        response = self._conn.call("poll_events", from_seq=self._events_next_seq,
                                   max_batches=max_batches, namespace_id=nsid)
        self._events_next_seq = response.next_seq
        self.events_truncated = bool(response.truncated)
        return list(response.batches)
