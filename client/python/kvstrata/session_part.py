"""SessionPart: what a part of a kvstrata.Session hears from the session's Connection.

A part (kvstrata.host_io.HostIO, kvstrata.gpu_io.GpuIO, kvstrata.jobs.SessionJobs) keeps
its own state and is told, through these methods, when the connection under it changes:
the daemon was lost, the same session came back, or a new session replaced it after a
daemon restart. Every method does nothing by default; a part overrides the ones it needs.
Connection.add_part() adds one; the parts are told in the order they were added.
"""
from __future__ import annotations

from typing import Callable, Dict, Optional


class SessionPart:
    """The connection events a part of a session may act on (all no-ops here)."""

    def jobs_lost(self, reason: str) -> None:
        """The session's pending jobs will not complete (the daemon is lost or restarted):
        report them failed. Any thread."""

    def resumed(self, session_id: int, tag: int) -> None:
        """The daemon is reachable again and still knows session session_id (a blip);
        tag: the job-id tag of its generation. Heartbeat thread."""

    def reregister(self, session_id: int,
                   namespace_ids: Dict[int, int]) -> Optional[Callable[[], None]]:
        """Register this part's daemon state again on new session session_id (heartbeat
        thread; namespace_ids: old namespace id -> new one). Answers what to apply once the
        connection switches to that session (run under the connection's lock, no calls),
        or None. A KVStrataError UNAVAILABLE aborts the reconnect attempt."""
        return None

    def switched(self, session_id: int, tag: int) -> None:
        """The connection now uses new session session_id (tag: its job-id tag). Called
        under the connection's lock, before anyone can call on the new session: no calls."""

    def reconnected(self) -> None:
        """After switched(), outside the lock (heartbeat thread): calls are allowed."""

    def close(self) -> None:
        """The session is closing: release what this part holds."""
