"""HeartbeatCounters: the counters a kvstrata.Session reports in its heartbeats.

The owner sets a provider (Session.set_heartbeat_counters): a callable answering
{name: count}, its own counts since it started (cumulative, never reset). Every heartbeat
(the thread's, Session.heartbeat(), and one last before CloseSession) asks it and sends
the answer as HeartbeatRequest.counters; the daemon sums them over its sessions, ended ones
included (Admin.GetStats client_counters, `kvstrata stats`, the metrics page's
kvstrata_client_counter_total; docs/wire-protocol.md).

- A session reports what the provider counted since the previous session's last report
  the daemon took: a client that moves to a new session (a reconnect after the session
  ended, or a daemon restart) does not count its earlier counts twice.
- What the daemon would refuse is dropped here, each kind logged once: names that are not
  1..64 bytes of [a-z0-9_], values that are not integers >= 0 (capped at 2^64 - 1), and
  entries past the 32nd by name.
- A provider that raises, or answers no mapping, is logged (a warning once, then at debug
  level) and that heartbeat goes without counters: the heartbeat itself never fails for it.
- A report the daemon refuses anyway (INVALID_ARGUMENT, or RESOURCE_EXHAUSTED for its
  limit of distinct names) is logged once and the heartbeat sent again without counters.

Thread-safe.
"""
from __future__ import annotations

import logging
import re
import threading
from typing import Any, Callable, Dict, Mapping, Optional, Set, Tuple

log = logging.getLogger("kvstrata")

MAX_ENTRIES = 32
NAME = re.compile(r"[a-z0-9_]{1,64}")
MAX_VALUE = 2**64 - 1

Provider = Callable[[], Mapping[str, int]]


class HeartbeatCounters:
    """See the module docstring."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._provider: Optional[Provider] = None
        self._session: Optional[int] = None   # the session `_taken` belongs to
        self._base: Dict[str, int] = {}       # counted before that session: not sent again
        self._taken: Dict[str, int] = {}      # the last values the daemon took, absolute
        self._logged: Set[str] = set()        # what was logged once already

    def set_provider(self, provider: Optional[Provider]) -> None:
        """provider() -> {name: cumulative count}; None: no counters."""
        if provider is not None and not callable(provider):
            raise TypeError(f"the heartbeat counters provider must be callable, got "
                            f"{type(provider).__name__}")
        with self._lock:
            self._provider = provider

    def report(self, session_id: int) -> Tuple[Dict[str, int], Dict[str, int]]:
        """(the counters to send for session_id, the provider's values they stand for);
        both empty without a provider or when it failed."""
        with self._lock:
            provider = self._provider
        if provider is None:
            return {}, {}
        try:
            values = provider()
            if not isinstance(values, Mapping):
                raise TypeError(f"it answered {type(values).__name__}, not a mapping")
            absolute = self._clean(values)
        except Exception as err:  # noqa: BLE001 - never let the provider fail a heartbeat
            self._once("provider", "kvstrata: the heartbeat counters provider failed (the "
                       "heartbeat goes without counters): %r", err)
            return {}, {}
        with self._lock:
            if session_id != self._session:   # a new session: what the last one took stays
                self._base = dict(self._taken)
                self._session = session_id
            send = {name: max(0, value - self._base.get(name, 0))
                    for name, value in absolute.items()}
        return send, absolute

    def taken(self, session_id: int, absolute: Dict[str, int]) -> None:
        """The daemon took the report made of `absolute` for session_id."""
        with self._lock:
            if session_id == self._session:
                self._taken.update(absolute)

    def refused(self, err: BaseException) -> None:
        self._once("refused", "kvstrata: the daemon refused the heartbeat's counters (the "
                   "heartbeat is sent without them): %s", err)

    def _clean(self, values: Mapping[Any, Any]) -> Dict[str, int]:
        out: Dict[str, int] = {}
        for name in sorted(values, key=str):
            value = values[name]
            if not isinstance(name, str) or not NAME.fullmatch(name):
                self._once(f"name:{name!r}", "kvstrata: heartbeat counter %r dropped: a name "
                           "is 1..64 characters of [a-z0-9_]", name)
            elif isinstance(value, bool) or not isinstance(value, int) or value < 0:
                self._once(f"value:{name}", "kvstrata: heartbeat counter %s dropped: %r is not "
                           "an integer >= 0", name, value)
            elif len(out) == MAX_ENTRIES:
                self._once("entries", "kvstrata: heartbeat counters past the %dth (by name) "
                           "dropped, from %s on", MAX_ENTRIES, name)
                break
            else:
                out[name] = min(int(value), MAX_VALUE)
        return out

    def _once(self, key: str, msg: str, *args: Any) -> None:
        with self._lock:
            first = key not in self._logged
            if len(self._logged) < 1024:
                self._logged.add(key)
        log.log(logging.WARNING if first else logging.DEBUG, msg, *args)
