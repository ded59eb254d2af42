"""Connection: the session's lifecycle on the daemon (open, session id, lost or not, close).

The part of kvstrata.Session every other part builds on: it opens the session, answers the
session id for each call (DaemonUnavailable at once while reconnecting), notices a lost
daemon or session from any failed call, registers namespaces (kept to be registered again
after a restart), finds the daemon's side sockets (shared-memory fd socket, fast path) and
closes everything. The heartbeat thread and the reconnect are in kvstrata.reconnect.

Parts of the session keep their state on the same object; a part initialises it in
`_init_parts()` (before the session opens) and releases it in `_close_parts()`.
"""
from __future__ import annotations

import logging
import os
import socket
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import grpc
from google.protobuf.message import Message

from .client import Client, TlsRootCert
from .errors import DaemonUnavailable, KVStrataError, session_unknown
from .fast_path import FastPathSocket
from .spec import RegisteredNamespace, namespace_spec

log = logging.getLogger("kvstrata")


class Connection:
    """Opens a session on construction; see kvstrata.Session for the arguments."""

    def __init__(self, client: Optional[Client] = None, *, endpoint: Optional[str] = None,
                 client_name: str = "kvstrata-python", heartbeat_timeout_ms: int = 0,
                 hostname: Optional[str] = None, pid: Optional[int] = None,
                 token: Optional[str] = None, tls_root_cert: TlsRootCert = None,
                 timeout: Optional[float] = None, auto_reconnect: bool = True,
                 on_reconnect: Optional[Callable[[Any], Any]] = None,
                 reconnect_backoff: Tuple[float, float] = (0.05, 2.0)) -> None:
        self._owns_client = client is None
        if client is None:
            kwargs = {} if timeout is None else {"timeout": timeout}
            client = Client(endpoint, token=token, tls_root_cert=tls_root_cert, **kwargs)
        self.client = client
        self.last_error: Optional[BaseException] = None
        self._alive = False
        self._closed = False
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        # Lookup and job frames on the daemon's fast-path socket (see fast_path.py); False (or
        # KVSTRATA_FAST_PATH=0) to use gRPC only.
        self.fast_path = os.environ.get("KVSTRATA_FAST_PATH", "1") != "0"
        self._fast_sockets: Dict[str, FastPathSocket] = {}
        self._side_sockets: Dict[str, str] = {}  # side_socket(): advertised -> reachable path
        self._init_parts()
        self.auto_reconnect = bool(auto_reconnect)
        self.on_reconnect = on_reconnect
        self.reconnect_attempts = 0   # reconnect attempts made (all disconnects together)
        self._backoff = (float(reconnect_backoff[0]), float(reconnect_backoff[1]))
        # Guards open_response (the session id), _connected, _generation and the lists of
        # what to re-register: the heartbeat thread swaps them while callers read them.
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._connected = True
        self._generation = 0
        self._session_gone = False    # the daemon no longer knows open_response.session_id
        self._lost_since: Optional[float] = None
        self._namespaces: List[Tuple[Message, RegisteredNamespace]] = []
        self._open_args = dict(client_name=client_name, pid=os.getpid() if pid is None else pid,
                               hostname=socket.gethostname() if hostname is None else hostname,
                               heartbeat_timeout_ms=heartbeat_timeout_ms)
        try:
            self.open_response: Message = client.open_session(**self._open_args)
        except BaseException:
            if self._owns_client:
                client.close()
            raise
        self._alive = True
        self._last_ok = time.monotonic()
        if self.heartbeat_timeout_ms > 0:
            self._thread = threading.Thread(target=self._heartbeat_loop, daemon=True,
                                            name=f"kvstrata-heartbeat-{self.session_id}")
            self._thread.start()

    # ------------------------------------------------------------------ parts

    def _init_parts(self) -> None:
        """The other parts' state, set before the session opens (see kvstrata.Session)."""

    def _close_parts(self) -> None:
        """Release the other parts' state on close (see kvstrata.Session)."""

    def _heartbeat_loop(self) -> None:
        """The heartbeat thread's body: kvstrata.reconnect.Reconnect defines it."""
        raise NotImplementedError("a Connection heart-beats through kvstrata.Session")

    def _fail_jobs(self, reason: str) -> None:  # kvstrata.jobs.SessionJobs
        """Report the session's pending jobs failed (the jobs part overrides this)."""

    # ------------------------------------------------------------------ properties

    @property
    def session_id(self) -> int:
        """The daemon's id for this session."""
        return self.open_response.session_id

    @property
    def heartbeat_timeout_ms(self) -> int:
        """Heartbeat deadline in force, as answered by the daemon."""
        return self.open_response.heartbeat_timeout_ms

    @property
    def daemon_instance_id(self) -> str:
        """Changes on every daemon start."""
        return self.open_response.daemon_instance_id

    @property
    def alive(self) -> bool:
        """False once closed, or while heartbeats show the daemon dropped the session."""
        return self._alive and self._connected and not self._closed

    @property
    def connected(self) -> bool:
        """False from noticing a lost daemon / session until the reconnect completed."""
        return self._connected and not self._closed

    @property
    def generation(self) -> int:
        """0 for the first session, +1 for every successful reconnect to a new session."""
        return self._generation

    @property
    def closed(self) -> bool:
        """True after close()."""
        return self._closed

    # ------------------------------------------------------------------ session id

    def _sid(self) -> int:
        """The current session id; DaemonUnavailable at once while disconnected."""
        with self._lock:
            if self.auto_reconnect and not self._connected and not self._closed:
                raise DaemonUnavailable(
                    grpc.StatusCode.UNAVAILABLE,
                    f"kvstratad is unreachable or restarted; reconnecting (attempt "
                    f"{self.reconnect_attempts}, last error: {self.last_error})",
                    self.client.endpoint.target)
            return self.open_response.session_id

    def _check_same_session(self, sid: int, what: str) -> None:
        """DaemonUnavailable when session sid was replaced (call under self._lock)."""
        if sid != self.open_response.session_id:
            raise DaemonUnavailable(grpc.StatusCode.UNAVAILABLE,
                                    f"the session was lost while registering {what}",
                                    self.client.endpoint.target)

    def _call(self, rpc: str, sid: Optional[int] = None, **fields: Any) -> Any:
        """self.client.<rpc>(session_id=..., **fields); notices a lost daemon or session."""
        if sid is None:
            sid = self._sid()
        try:
            return getattr(self.client, rpc)(session_id=sid, **fields)
        except KVStrataError as err:
            raise self._failed(err, sid) from None

    def _failed(self, err: KVStrataError, sid: int) -> KVStrataError:
        """The error to raise for a failed call of session sid (and notice a lost one)."""
        if not self.auto_reconnect or self._closed:
            return err
        gone = session_unknown(err, sid)
        if err.code == grpc.StatusCode.UNAVAILABLE or gone:
            self._note_lost(err, sid)
        if gone:
            return DaemonUnavailable(grpc.StatusCode.UNAVAILABLE,
                                     f"the daemon no longer knows session {sid} (restarted?); "
                                     f"reconnecting: {err.message}", err.endpoint)
        return err

    def _note_lost(self, err: BaseException, sid: int) -> None:
        """Session sid looks lost (err): disconnect, fail its jobs, wake the heartbeat thread."""
        gone = session_unknown(err, sid)
        with self._lock:
            if self._closed or sid != self.open_response.session_id:
                return  # Old news: a call of an earlier session.
            self.last_error = err
            if self._connected:
                self._connected = False
                self._lost_since = time.monotonic()
                log.warning("kvstrata session %d: %s; reconnecting to %s", sid,
                            "the daemon no longer knows the session" if gone
                            else f"lost the daemon ({err})", self.client.endpoint.target)
            if gone:
                self._session_gone = True
            # A daemon behind a Unix socket that refuses connections is gone, and so are its
            # jobs; over TCP, wait for the heartbeat deadline before calling them lost.
            fail_jobs = (self._session_gone or self.client.endpoint.kind == "unix"
                         or time.monotonic() - self._lost_since > self.heartbeat_timeout_ms / 1000)
        if fail_jobs:
            self._fail_jobs(f"kvstratad was lost ({err}): recompute these blocks")
        self._wake.set()

    # ------------------------------------------------------------------ calls

    def heartbeat(self) -> Message:
        """One heartbeat now, in the caller's thread (raises KVStrataError)."""
        response = self._call("heartbeat")
        self._last_ok = time.monotonic()
        return response

    def register_namespace(self, spec: Any = None, **spec_fields: Any) -> RegisteredNamespace:
        """Register a namespace; fields as for kvstrata.namespace_spec (engine="vllm", ...).

        The session keeps the spec and registers it again after a daemon restart."""
        spec_msg = namespace_spec(spec, **spec_fields)
        sid = self._sid()
        response = self._call("register_namespace", sid, spec=spec_msg)
        ns = RegisteredNamespace(response.namespace_id, response.fingerprint,
                                 response.bytes_per_block)
        with self._lock:  # Lost meanwhile: not re-registered.
            self._check_same_session(sid, "the namespace")
            self._namespaces.append((spec_msg, ns))
        return ns

    # ------------------------------------------------------------------ side sockets

    def _fast_path_for(self, keys: List[bytes]) -> Optional[str]:
        """The path of the daemon's fast-path socket for these keys, or None (then use
        gRPC): see _fast_path; also None for no keys or keys of several lengths."""
        if not keys or len(set(map(len, keys))) != 1:
            return None
        return self._fast_path()

    def _fast_path(self) -> Optional[str]:
        """The path of the daemon's fast-path socket, or None (then use gRPC): remote or
        old daemons, or fast_path turned off."""
        if (not self.fast_path or not getattr(self.open_response, "packed_transfers", False)
                or self.client.endpoint.kind != "unix"):
            return None
        return self.side_socket(getattr(self.open_response, "lookup_socket", "")) or None

    def _fast_socket(self, keys: List[bytes]) -> Optional[FastPathSocket]:
        """The lookup connection to the daemon's fast-path socket for these keys, or None
        (see _fast_path_for)."""
        path = self._fast_path_for(keys)
        if path is None:
            return None
        fast = self._fast_sockets.get(path)
        if fast is None:
            for old in self._fast_sockets.values():
                old.close()
            fast = self._fast_sockets.setdefault(path, FastPathSocket(path, self.client.timeout))
        return fast

    def side_socket(self, advertised: str) -> str:
        """A socket the daemon advertises beside its endpoint (the shared-memory fd socket,
        the fast path), as this process reaches it. The daemon names it as it sees it; a
        process in another mount namespace (a container that mounts the socket directory at
        another path) finds the same socket beside the endpoint it connected to."""
        known = self._side_sockets.get(advertised)
        if known is not None or not advertised:
            return known or advertised
        found = advertised
        ep = self.client.endpoint
        if not os.path.exists(advertised) and getattr(ep, "kind", None) == "unix":
            beside = os.path.join(os.path.dirname(ep.address), os.path.basename(advertised))
            found = beside if os.path.exists(beside) else advertised
        if os.path.exists(found):  # remembered only once it is there (not while restarting)
            self._side_sockets[advertised] = found
        return found

    # ------------------------------------------------------------------ close

    def close(self) -> None:
        """Stop heart-beating and close the session; idempotent, never raises KVStrataError."""
        if self._closed:
            return
        with self._lock:
            self._closed = True
            was_connected = self._connected
        self._stop.set()
        self._wake.set()
        self._close_parts()
        for fast in self._fast_sockets.values():
            fast.close()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=self.client.timeout + 1.0)
        try:
            if was_connected or not self.auto_reconnect:  # Else there is nothing to close.
                self.client.close_session(session_id=self.session_id)
        except KVStrataError as err:  # Gone already (expired, daemon restarted) or unreachable.
            self.last_error = err
        finally:
            self._alive = False
            if self._owns_client:
                self.client.close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("alive" if self.alive else
                                               ("reconnecting" if self.auto_reconnect else "lost"))
        return (f"kvstrata.Session(id={self.session_id}, {state}, generation {self._generation}, "
                f"{self.client.endpoint})")
