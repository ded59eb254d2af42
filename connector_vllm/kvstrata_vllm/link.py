"""Link: the connector's kvstrata.Session, opened lazily, that never lets the daemon fail vLLM.

- The daemon unreachable at start: no session; every use answers None (a miss), and a new
  attempt is made at most every `reconnect_interval_s`.
- The daemon lost mid-run: the Session's own auto_reconnect re-opens a session and
  re-registers the namespaces (and CUDA registrations) in place; meanwhile calls raise
  DaemonUnavailable, which callers turn into misses through `guard`.
- Each outage is logged once (warning) and its end once (info).
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Dict, Optional, TypeVar

import kvstrata

from .config import ConnectorConfig

log = logging.getLogger("kvstrata_vllm")
T = TypeVar("T")


class Link:
    def __init__(self, cfg: ConnectorConfig, client_name: str,
                 on_session: Optional[Callable[[kvstrata.Session], None]] = None) -> None:
        self.cfg = cfg
        self.client_name = client_name
        self.on_session = on_session      # e.g. register namespaces once a session exists
        self._session: Optional[kvstrata.Session] = None
        self._lock = threading.Lock()
        self._next_try = 0.0
        self._down = False                # an outage is being reported
        self._closed = False
        self.namespaces: Dict[Any, kvstrata.RegisteredNamespace] = {}
        self.errors = 0

    @property
    def endpoint(self) -> str:
        return self.cfg.endpoint or str(kvstrata.default_endpoint())

    def session(self) -> Optional[kvstrata.Session]:
        """The connected session, or None (daemon unreachable: treat as a miss)."""
        s = self._session
        if s is not None:
            if s.connected:
                self._mark_up()
                return s
            self._mark_down(s.last_error)
            return None
        with self._lock:
            if self._closed or time.monotonic() < self._next_try:
                return None
            self._next_try = time.monotonic() + self.cfg.reconnect_interval_s
            if self._session is None:
                try:
                    s = kvstrata.Session(endpoint=self.cfg.endpoint, client_name=self.client_name,
                                         timeout=self.cfg.timeout_s)
                except Exception as err:  # noqa: BLE001 - unreachable, refused, bad endpoint
                    self._mark_down(err)
                    return None
                try:
                    if self.on_session is not None:
                        self.on_session(s)
                except Exception as err:  # noqa: BLE001
                    s.close()
                    self._mark_down(err)
                    return None
                self._session = s
        self._mark_up()
        return self._session

    def register_namespace(self, s: kvstrata.Session, key: Any,
                           fields: Dict[str, Any]) -> kvstrata.RegisteredNamespace:
        """Register once per key; the Session re-registers it after daemon restarts."""
        ns = self.namespaces.get(key)
        if ns is None:
            ns = s.register_namespace(**fields)
            self.namespaces[key] = ns
        return ns

    def guard(self, what: str, fn: Callable[[], T], default: T) -> T:
        """fn(); a kvstrata / OS error is logged once per outage and answers default."""
        try:
            return fn()
        except (kvstrata.KVStrataError, OSError, TimeoutError) as err:
            self.errors += 1
            s = self._session
            if isinstance(err, kvstrata.DaemonUnavailable) or (s is not None and not s.connected):
                self._mark_down(err)
            else:
                log.warning("kvstrata_vllm: %s failed: %s (treated as a miss)", what, err)
            return default

    def _mark_down(self, err: Any) -> None:
        if not self._down:
            self._down = True
            log.warning("kvstrata_vllm: kvstratad at %s is unreachable (%s): serving without "
                        "the KVStrata cache (misses, recompute) until it is back",
                        self.endpoint, err)

    def _mark_up(self) -> None:
        if self._down:
            self._down = False
            log.warning("kvstrata_vllm: kvstratad at %s is reachable again", self.endpoint)

    @property
    def down(self) -> bool:
        return self._down

    def close(self) -> None:
        with self._lock:
            self._closed = True
            s, self._session = self._session, None
        if s is not None:
            s.close()
