"""DaemonLink: an engine's kvstrata.Session, opened lazily, that never lets the daemon fail
the engine. Both connectors (kvstrata_vllm, kvstrata_sglang) hold their sessions in one.

- The daemon unreachable at start: no session; session() answers None (treat it as a
  miss), and a new attempt is made at most every `retry_interval_s`.
- The daemon lost mid-run: the Session's own auto_reconnect opens a new session and
  registers the namespaces (and CUDA registrations) again in place; meanwhile session()
  answers None and calls raise DaemonUnavailable, which `guard` turns into misses.
- Each outage is logged once (warning) and its end once.
- Namespaces: registered once per key (`register_namespace`, e.g. from `on_session`), or
  kept with `set_namespace` and registered whenever a session is there.
- Lookups go over the daemon's lookup fast path (kvstrata.fast_path) unless fast_lookup is
  False.
- Counters for the daemon's `kvstrata stats` (e.g. the load planner's decisions):
  set_heartbeat_counters(provider) gives every session of the link that provider
  (Session.set_heartbeat_counters).
- raise_refused=True: a refusal that is not "unreachable" (credentials, a bad namespace
  spec) raises from session() instead of degrading: the operator must know.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Dict, Mapping, Optional, Tuple, TypeVar

import grpc

from .client import TlsRootCert
from .endpoint import default_endpoint
from .errors import DaemonUnavailable, KVStrataError
from .session import Session
from .spec import RegisteredNamespace

T = TypeVar("T")

# Codes that mean "the daemon is not there (now)": degrade, do not raise.
UNREACHABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
               grpc.StatusCode.CANCELLED)


def is_unreachable(err: BaseException) -> bool:
    return isinstance(err, KVStrataError) and err.code in UNREACHABLE


class DaemonLink:
    """See the module docstring. `log` and `without` name the engine in the outage
    warning ("<log name>: kvstratad at ... is unreachable (...): <without> until it is back")."""

    def __init__(self, *, endpoint: Optional[str] = None, client_name: str = "kvstrata-python",
                 timeout: Optional[float] = None, token: Optional[str] = None,
                 tls_root_cert: TlsRootCert = None, heartbeat_timeout_ms: int = 0,
                 retry_interval_s: float = 1.0,
                 reconnect_backoff: Tuple[float, float] = (0.05, 2.0), fast_lookup: bool = True,
                 on_session: Optional[Callable[[Session], None]] = None,
                 raise_refused: bool = False, log: Optional[logging.Logger] = None,
                 without: str = "serving without the KVStrata cache (misses, recompute)") -> None:
        self.endpoint_arg = endpoint
        self.client_name = client_name
        self.timeout = timeout
        self.token = token
        self.tls_root_cert = tls_root_cert
        self.heartbeat_timeout_ms = heartbeat_timeout_ms
        self.retry_interval_s = retry_interval_s
        self.reconnect_backoff = reconnect_backoff
        self.fast_lookup = fast_lookup
        self.on_session = on_session      # e.g. register namespaces once a session exists
        self.raise_refused = raise_refused
        self.log = log or logging.getLogger("kvstrata")
        self.without = without
        self._session: Optional[Session] = None
        self._lock = threading.Lock()
        self._next_try = 0.0
        self._down = False                # an outage is being reported
        self._closed = False
        self._specs: Dict[Any, Dict[str, Any]] = {}   # set_namespace(): registered when possible
        self._specs_registered = True     # every namespace of _specs is in `namespaces`
        self.namespaces: Dict[Any, RegisteredNamespace] = {}
        self.errors = 0
        self._counters: Optional[Callable[[], Mapping[str, int]]] = None

    @property
    def endpoint(self) -> str:
        return self.endpoint_arg or str(default_endpoint())

    @property
    def down(self) -> bool:
        return self._down

    @property
    def current(self) -> Optional[Session]:
        """The session, connected or not (None before the daemon was reached); no attempt."""
        return self._session

    # ------------------------------------------------------------------ the session

    def session(self) -> Optional[Session]:
        """The connected session (its set_namespace namespaces registered), or None
        without waiting (daemon unreachable: treat as a miss)."""
        s = self._session
        if s is not None and self._specs_registered:
            if s.connected:
                self._mark_up()
                return s
            self._mark_down(s.last_error)
            return None
        with self._lock:
            if self._closed or time.monotonic() < self._next_try:
                return None
            self._next_try = time.monotonic() + self.retry_interval_s
            try:
                if self._session is None:
                    self._session = self._open()
                    # set_heartbeat_counters may have run during _open, seeing no session
                    # yet: its provider is in _counters now (it is set before it looks).
                    self._session.set_heartbeat_counters(self._counters)
                s = self._session
                if not s.connected:
                    self._mark_down(s.last_error)
                    return None
                for key, fields in self._specs.items():
                    self.register_namespace(s, key, fields)
                self._specs_registered = True
            except Exception as err:  # noqa: BLE001 - unreachable, refused, bad endpoint
                if self.raise_refused and not is_unreachable(err):
                    self._next_try = 0.0
                    raise
                self._mark_down(err)
                return None
        self._mark_up()
        return s

    def _open(self) -> Session:
        s = Session(endpoint=self.endpoint_arg, client_name=self.client_name,
                    heartbeat_timeout_ms=self.heartbeat_timeout_ms, token=self.token,
                    tls_root_cert=self.tls_root_cert, timeout=self.timeout,
                    auto_reconnect=True, reconnect_backoff=self.reconnect_backoff)
        s.fast_path = s.fast_path and self.fast_lookup  # lookups over the fast path
        s.set_heartbeat_counters(self._counters)
        try:
            if self.on_session is not None:
                self.on_session(s)
        except BaseException:
            s.close()
            raise
        return s

    def set_heartbeat_counters(self,
                               provider: Optional[Callable[[], Mapping[str, int]]]) -> None:
        """The counters the link's sessions send with their heartbeats (now and from then
        on): provider() -> {name: cumulative count} (Session.set_heartbeat_counters).
        Without the link's lock: a session being opened meanwhile gets it once assigned."""
        self._counters = provider   # before reading _session: session() reads it after
        s = self._session
        if s is not None:
            s.set_heartbeat_counters(provider)

    # ------------------------------------------------------------------ namespaces

    def register_namespace(self, s: Session, key: Any,
                           fields: Dict[str, Any]) -> RegisteredNamespace:
        """Register once per key; the Session registers it again after daemon restarts."""
        ns = self.namespaces.get(key)
        if ns is None:
            ns = s.register_namespace(**fields)
            self.namespaces[key] = ns
            self.log.info("kvstrata: namespace %s registered (%d bytes per block) at %s",
                          ns.fingerprint, ns.bytes_per_block, s.client.endpoint.target)
        return ns

    def set_namespace(self, key: Any, fields: Dict[str, Any]) -> None:
        """Keep the namespace `key` (again, with new fields) and register it as soon as a
        session is there (session() tries now: a refused spec raises with raise_refused)."""
        with self._lock:
            self._specs[key] = dict(fields)
            self.namespaces.pop(key, None)
            self._specs_registered = False
            self._next_try = 0.0
        self.session()

    # ------------------------------------------------------------------ failures

    def guard(self, what: str, fn: Callable[[], T], default: T) -> T:
        """fn(); a kvstrata / OS error is logged once per outage and answers default."""
        try:
            return fn()
        except (KVStrataError, OSError, TimeoutError) as err:
            self.errors += 1
            s = self._session
            if isinstance(err, DaemonUnavailable) or (s is not None and not s.connected):
                self._mark_down(err)
            else:
                self.log.warning("%s: %s failed: %s (treated as a miss)", self.log.name, what, err)
            return default

    def failed(self, err: BaseException) -> None:
        """A call failed: when the daemon looks gone, let the session notice now (its
        heartbeat would, a little later) so that the next calls fail fast."""
        if not isinstance(err, KVStrataError) or err.code != grpc.StatusCode.UNAVAILABLE:
            return  # A deadline: the heartbeat thread decides (a hung daemon costs one timeout).
        s = self._session
        if s is not None and s.connected:
            try:
                s.heartbeat()  # Fails the same way and marks the session lost.
            except KVStrataError:
                pass

    def _mark_down(self, err: Any) -> None:
        if not self._down:
            self._down = True
            self.log.warning("%s: kvstratad at %s is unreachable (%s): %s until it is back",
                             self.log.name, self.endpoint, err, self.without)

    def _mark_up(self) -> None:
        if self._down:
            self._down = False
            self.log.warning("%s: kvstratad at %s is reachable again", self.log.name,
                             self.endpoint)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            s, self._session = self._session, None
        if s is not None:
            s.close()
