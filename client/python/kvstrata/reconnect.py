"""Heartbeat: a kvstrata.Session's heartbeat thread, which also drives the reconnect.

With heartbeat_timeout_ms > 0 the thread heart-beats every third of the daemon's deadline,
with the counters of the connection's provider (kvstrata.heartbeat_counters; a provider that
fails costs a heartbeat its counters, never the heartbeat).
Heartbeat failures never raise: they are kept in the connection's `last_error`. With
auto_reconnect=True a lost daemon or session (UNAVAILABLE, NOT_FOUND for the session, a
heartbeat past the deadline, or a failed call noticed by a caller thread, see
kvstrata.connection) is retried with capped exponential back-off: once the daemon answers its
health check, Connection.reconnect() brings the same session back or opens a new one with
everything registered again. Without auto_reconnect a lost session stays lost.

The Heartbeat is given its Connection and uses its public methods only.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Optional, Tuple

import grpc

from .errors import DaemonUnavailable, KVStrataError

log = logging.getLogger("kvstrata")


class Heartbeat:
    """The heartbeat thread of one kvstrata.connection.Connection (`conn`)."""

    def __init__(self, conn: Any, backoff: Tuple[float, float]) -> None:
        self._conn = conn
        self._backoff = (float(backoff[0]), float(backoff[1]))
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.attempts = 0                 # reconnect attempts made (all disconnects together)
        self.last_ok = time.monotonic()   # when a heartbeat (or a reconnect) last got through

    def start(self, name: str) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True, name=name)
        self._thread.start()

    def ok(self) -> None:
        """A heartbeat got through now."""
        self.last_ok = time.monotonic()

    def wake(self) -> None:
        """Look at the connection now (it was noticed lost)."""
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def join(self, timeout: float) -> None:
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=timeout)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                if self._conn.connected:
                    if not self._beat():
                        return
                elif not self._reconnect_loop():
                    return
        except Exception:  # noqa: BLE001 - never let anything escape this thread
            log.exception("kvstrata: the heartbeat thread failed")

    def _beat(self) -> bool:
        """Wait one interval (or a wake-up), heart-beat; False to end the thread."""
        conn = self._conn
        timeout_s = conn.heartbeat_timeout_ms / 1000.0
        interval = timeout_s / 3.0
        self._wake.wait(interval)
        self._wake.clear()
        if self._stop.is_set() or not conn.connected:
            return True
        sid, _ = conn.session_tag()
        try:
            conn.send_heartbeat(sid, timeout=max(interval, 0.05))
            self.ok()
            return True
        except Exception as err:  # Never let anything escape this thread.
            conn.last_error = err
            gone = isinstance(err, KVStrataError) and err.code == grpc.StatusCode.NOT_FOUND
            late = time.monotonic() - self.last_ok > timeout_s
            if not conn.auto_reconnect:
                if gone or late:
                    if not self._stop.is_set():
                        log.warning("kvstrata session %d lost: %s", sid, err)
                    conn.mark_dead()
                    return False
                return True
            if (gone or late or isinstance(err, KVStrataError)
                    and err.code == grpc.StatusCode.UNAVAILABLE):
                # Past the deadline the daemon has ended the session.
                conn.note_lost(err, sid, past_deadline=late and not gone
                               and isinstance(err, KVStrataError))
            return True

    def _reconnect_loop(self) -> bool:
        """Retry until reconnected (True) or closed (False), backing off between attempts."""
        conn = self._conn
        delay = self._backoff[0]
        while not self._stop.is_set():
            if conn.client.closed:  # Its owner closed the client under the session.
                log.warning("kvstrata: not reconnecting: the session's Client was closed")
                return False
            self.attempts += 1
            try:
                if self._attempt():
                    return True
            except Exception as err:  # noqa: BLE001 - keep retrying
                conn.last_error = err
                log.debug("kvstrata: reconnect attempt %d failed: %s", self.attempts, err)
            if conn.lost_overdue():  # Past the deadline the daemon has dropped the session.
                conn.fail_jobs("kvstratad was unreachable past the heartbeat deadline: "
                               "recompute these blocks")
            if self._stop.wait(delay):
                break
            delay = min(delay * 2, self._backoff[1])
        return False

    def _attempt(self) -> bool:
        """One attempt: the daemon answers its health check, then Connection.reconnect()."""
        client = self._conn.client
        probe_timeout = max(0.05, min(client.timeout, max(self._backoff[1], 1.0)))
        if not client.probe(probe_timeout):
            self._conn.last_error = DaemonUnavailable(
                grpc.StatusCode.UNAVAILABLE, "the daemon does not answer the health check",
                client.endpoint.target)
            return False
        client.reset_channel()  # The old channel may be deep in its reconnect back-off.
        return self._conn.reconnect(probe_timeout)
