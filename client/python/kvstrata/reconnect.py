"""Reconnect: the session's heartbeat thread, and a new session after a daemon restart.

With heartbeat_timeout_ms > 0 a background thread heart-beats every third of the daemon's
deadline. Heartbeat failures never raise: they are kept in `.last_error`. With
auto_reconnect=True a restarted daemon (UNAVAILABLE, NOT_FOUND for the session, or a failed
call noticed by a caller thread, see kvstrata.connection) is retried with capped exponential
back-off; a new session gets every namespace and CUDA KV-cache registration registered
again, updated in place (the caller's handles stay valid), the shared region mapped again
and the completion tracker moved to it. on_reconnect(session) runs last, in this thread.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Dict, List, Tuple

import grpc

from .connection import Connection
from .cuda import CudaRegistration
from .errors import DaemonUnavailable, KVStrataError, session_unknown
from .jobs import job_tag
from .spec import RegisteredNamespace

log = logging.getLogger("kvstrata")


class Reconnect(Connection):
    """The heartbeat thread and the reconnect of a kvstrata.Session."""

    def _heartbeat_loop(self) -> None:
        try:
            while not self._stop.is_set():
                if self._connected:
                    if not self._heartbeat_once():
                        return
                elif not self._reconnect_loop():
                    return
        except Exception:  # noqa: BLE001 - never let anything escape this thread
            log.exception("kvstrata: the heartbeat thread failed")

    def _heartbeat_once(self) -> bool:
        """Wait one interval (or a wake-up), heart-beat; False to end the thread."""
        timeout_s = self.heartbeat_timeout_ms / 1000.0
        interval = timeout_s / 3.0
        self._wake.wait(interval)
        self._wake.clear()
        if self._stop.is_set() or not self._connected:
            return True
        with self._lock:
            sid = self.open_response.session_id
        try:
            self.client.heartbeat(session_id=sid, timeout=max(interval, 0.05))
            self._last_ok = time.monotonic()
            return True
        except Exception as err:  # Never let anything escape this thread.
            self.last_error = err
            gone = isinstance(err, KVStrataError) and err.code == grpc.StatusCode.NOT_FOUND
            late = time.monotonic() - self._last_ok > timeout_s
            if not self.auto_reconnect:
                if gone or late:
                    if not self._stop.is_set():
                        log.warning("kvstrata session %d lost: %s", sid, err)
                    self._alive = False
                    return False
                return True
            if (gone or late or isinstance(err, KVStrataError)
                    and err.code == grpc.StatusCode.UNAVAILABLE):
                if late and not gone and isinstance(err, KVStrataError):
                    with self._lock:  # Past the deadline: the daemon has ended the session.
                        self._session_gone = sid == self.open_response.session_id
                self._note_lost(err, sid)
            return True

    def _reconnect_loop(self) -> bool:
        """Retry until reconnected (True) or closed (False), backing off between attempts."""
        delay = self._backoff[0]
        while not self._stop.is_set():
            if self.client.closed:  # Its owner closed the client under the session.
                log.warning("kvstrata: not reconnecting: the session's Client was closed")
                return False
            self.reconnect_attempts += 1
            try:
                if self._reconnect_once():
                    return True
            except Exception as err:  # noqa: BLE001 - keep retrying
                self.last_error = err
                log.debug("kvstrata: reconnect attempt %d failed: %s", self.reconnect_attempts, err)
            with self._lock:
                overdue = (self._lost_since is not None and time.monotonic() - self._lost_since
                           > self.heartbeat_timeout_ms / 1000.0)
            if overdue:  # Past the deadline the daemon has dropped the session anyway.
                self._fail_jobs("kvstratad was unreachable past the heartbeat deadline: "
                                "recompute these blocks")
            if self._stop.wait(delay):
                break
            delay = min(delay * 2, self._backoff[1])
        return False

    def _reconnect_once(self) -> bool:
        """One attempt: same session still there, or a new one with everything re-registered."""
        client = self.client
        probe_timeout = max(0.05, min(client.timeout, max(self._backoff[1], 1.0)))
        if not client.probe(probe_timeout):
            self.last_error = DaemonUnavailable(grpc.StatusCode.UNAVAILABLE,
                                                "the daemon does not answer the health check",
                                                client.endpoint.target)
            return False
        client.reset_channel()  # The old channel may be deep in its reconnect back-off.
        with self._lock:
            old = self.open_response
            gone = self._session_gone
        if not gone:
            try:
                client.heartbeat(session_id=old.session_id, timeout=probe_timeout)
            except KVStrataError as err:
                self.last_error = err
                if not session_unknown(err, old.session_id):
                    return False
                with self._lock:
                    self._session_gone = True
                self._fail_jobs("kvstratad restarted: recompute these blocks")
            else:  # The same daemon, and it still knows the session: a blip.
                with self._lock:
                    if self._closed:
                        return False
                    self._connected = True
                    self._lost_since = None
                    self._last_ok = time.monotonic()
                self._restart_stream()
                log.warning("kvstrata session %d: reachable again at %s (same session)",
                            old.session_id, client.endpoint.target)
                return True

        resp = client.open_session(timeout=probe_timeout, **self._open_args)
        try:
            ns_updates, reg_updates = self._reregister(resp.session_id)
        except BaseException:
            try:
                client.close_session(session_id=resp.session_id, timeout=probe_timeout)
            except KVStrataError:
                pass
            raise
        self._close_region()  # The old daemon's region; mapped again below if it was used.
        had_region = self._region_used
        with self._lock:
            if self._closed:
                try:
                    client.close_session(session_id=resp.session_id, timeout=probe_timeout)
                except KVStrataError:
                    pass
                return False
            self.open_response = resp
            for ns, r in ns_updates:
                ns._update(r.namespace_id, r.fingerprint, r.bytes_per_block)
            self._apply_cuda_updates(reg_updates)
            self._generation += 1
            generation = self._generation
            self._session_gone = False
            self._lost_since = None
            self._last_ok = time.monotonic()
            # Before anyone can submit on the new session.
            self._rebind_tracker(resp.session_id, job_tag(generation))
            self._connected = True
        same = resp.daemon_instance_id == old.daemon_instance_id
        log.warning("kvstrata: reconnected to %s%s: session %d -> %d (generation %d), "
                    "%d namespaces and %d CUDA registrations re-registered",
                    client.endpoint.target, "" if same else
                    f" (daemon instance {old.daemon_instance_id} -> {resp.daemon_instance_id})",
                    old.session_id, resp.session_id, generation, len(ns_updates), len(reg_updates))
        if had_region:
            try:
                self.shared_region()
            except KVStrataError as err:  # Mapped on first use instead.
                self.last_error = err
                log.warning("kvstrata: mapping the new daemon's region failed: %s", err)
        if self.on_reconnect is not None:
            try:
                self.on_reconnect(self)
            except Exception:  # noqa: BLE001 - the callback's problem, not the session's
                log.exception("kvstrata: the on_reconnect callback failed")
        return True

    def _reregister(self, sid: int) -> Tuple[List[Tuple[RegisteredNamespace, Any]],
                                             List[Tuple[CudaRegistration, int, int]]]:
        """Register the session's namespaces and CUDA KV caches on new session sid.

        No CUDA call is made here (this runs in the heartbeat thread, which has no CUDA
        context): the kept descriptions and IPC memory / event handles are sent again.
        UNAVAILABLE aborts the attempt; other refusals are logged and that handle stays
        stale (its calls then fail)."""
        with self._lock:
            namespaces = list(self._namespaces)
            registrations = self._live_cuda_registrations()
        timeout = self.client.timeout
        ns_updates: List[Tuple[RegisteredNamespace, Any]] = []
        new_ns_ids: Dict[int, int] = {}
        for spec, ns in namespaces:
            try:
                r = self.client.register_namespace(session_id=sid, spec=spec, timeout=timeout)
            except KVStrataError as err:
                if err.code == grpc.StatusCode.UNAVAILABLE:
                    raise
                self.last_error = err
                log.error("kvstrata: re-registering namespace %s failed: %s", ns.fingerprint, err)
                continue
            ns_updates.append((ns, r))
            new_ns_ids[ns.namespace_id] = r.namespace_id
        return ns_updates, self._reregister_cuda(sid, registrations, new_ns_ids)

    # ------------------------------------------------------------------ the other parts
    # What a reconnect asks of the other parts; kvstrata.Session lists those parts before
    # this class, so their methods (gpu_io, jobs, host_io) win over these no-ops.

    def _live_cuda_registrations(self) -> List[CudaRegistration]:
        return []

    def _reregister_cuda(self, sid: int, registrations: List[CudaRegistration],
                         new_ns_ids: Dict[int, int]) -> List[Tuple[CudaRegistration, int, int]]:
        return []

    def _apply_cuda_updates(self, reg_updates: List[Tuple[CudaRegistration, int, int]]) -> None:
        pass

    def _rebind_tracker(self, session_id: int, tag: int) -> None:
        pass

    def _restart_stream(self) -> None:
        pass

    def _close_region(self) -> None:
        pass

    def shared_region(self) -> Any:
        """The mapped region a reconnect remaps: kvstrata.host_io.HostIO defines it."""
        raise NotImplementedError("the shared region is mapped through kvstrata.Session")
