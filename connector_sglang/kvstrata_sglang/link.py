"""The backend's link to kvstratad: one Session, one namespace, fail-safe.

`get()` answers the open Session and the registered namespace, or None at once while the
daemon cannot be used: never reachable yet (then opening is retried at most every
retry_interval_s), or lost (the Session reconnects by itself in its heartbeat thread,
re-registers the namespace and maps the new daemon's region). Callers treat None as
"nothing stored, nothing found".
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Dict, Optional, Tuple

import grpc
import kvstrata

from .options import BackendOptions, read_secret_file

log = logging.getLogger("kvstrata_sglang")

# Codes that mean "the daemon is not there (now)": degrade, do not raise.
UNREACHABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
               grpc.StatusCode.CANCELLED)


def is_unreachable(err: BaseException) -> bool:
    return isinstance(err, kvstrata.KVStrataError) and err.code in UNREACHABLE


class DaemonLink:
    def __init__(self, options: BackendOptions) -> None:
        self.options = options
        self._token = read_secret_file("token_file", options.token_file)
        self._lock = threading.Lock()
        self._session: Optional[kvstrata.Session] = None
        self._spec: Optional[Dict[str, Any]] = None
        self._ns: Optional[kvstrata.RegisteredNamespace] = None
        self._next_try = 0.0
        self._warned = False
        self._closed = False

    # ------------------------------------------------------------------ state

    def set_namespace(self, spec: Dict[str, Any]) -> None:
        """The namespace to register (again, with a new spec after a new host pool)."""
        with self._lock:
            self._spec = dict(spec)
            self._ns = None
            self._next_try = 0.0
        self.get()  # Register now when the daemon is there (bad specs raise here).

    @property
    def session(self) -> Optional[kvstrata.Session]:
        return self._session

    def get(self) -> Optional[Tuple[kvstrata.Session, kvstrata.RegisteredNamespace]]:
        """(session, namespace) when usable now, else None without waiting."""
        s, ns = self._session, self._ns
        if s is not None and ns is not None:
            return (s, ns) if s.connected else None
        with self._lock:
            if self._closed or self._spec is None or time.monotonic() < self._next_try:
                return None
            try:
                if self._session is None:
                    self._session = self._open()
                if not self._session.connected:
                    return None
                if self._ns is None:
                    self._ns = self._session.register_namespace(**self._spec)
                    log.info("kvstrata: namespace %s registered (%d bytes per page) at %s",
                             self._ns.fingerprint, self._ns.bytes_per_block,
                             self._session.client.endpoint.target)
                self._warned = False
                return self._session, self._ns
            except kvstrata.KVStrataError as err:
                if not is_unreachable(err):
                    raise  # A refused namespace spec or credentials: the operator must know.
                self._next_try = time.monotonic() + self.options.retry_interval_s
                if not self._warned:
                    self._warned = True
                    log.warning("kvstrata: daemon unreachable (%s); HiCache L3 reads miss and "
                                "writes are skipped until it is back", err)
                return None

    def _open(self) -> kvstrata.Session:
        o = self.options
        backoff_max = max(0.05, min(2.0, o.retry_interval_s or 2.0))
        s = kvstrata.Session(endpoint=o.endpoint, client_name=o.client_name,
                             heartbeat_timeout_ms=o.heartbeat_timeout_ms, token=self._token,
                             tls_root_cert=o.tls_root_cert_file, timeout=o.timeout_s,
                             auto_reconnect=True, reconnect_backoff=(0.05, backoff_max))
        s.fast_path = s.fast_path and o.fast_lookup  # lookups (batch_exists) on the fast path
        return s

    def failed(self, err: BaseException) -> None:
        """A call failed: when the daemon looks gone, let the session notice now (its
        heartbeat would, a little later) so that the next calls fail fast."""
        if not isinstance(err, kvstrata.KVStrataError) or err.code != grpc.StatusCode.UNAVAILABLE:
            return  # A deadline: the heartbeat thread decides (a hung daemon costs one timeout).
        s = self._session
        if s is not None and s.connected:
            try:
                s.heartbeat()  # Fails the same way and marks the session lost.
            except kvstrata.KVStrataError:
                pass

    def close(self) -> None:
        with self._lock:
            self._closed = True
            s, self._session, self._ns = self._session, None, None
        if s is not None:
            s.close()
