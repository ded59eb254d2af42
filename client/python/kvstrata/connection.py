"""Connection: a kvstrata.Session's link to the daemon.

It opens the session, answers the session id for each call (DaemonUnavailable at once while
reconnecting), makes the gRPC calls and notices a lost daemon or session from any failed
one, registers namespaces (kept to be registered again after a restart), finds the daemon's
side sockets (shared-memory fd socket, fast path), owns the heartbeat thread
(kvstrata.reconnect.Heartbeat) and moves everything to a new session after a daemon restart.

The other parts of the session are given the Connection and use its public methods only:
- sid() / sid_tag(): the session id of a call (and its job-id tag); session_tag() the same
  without the reconnecting check;
- call(rpc, sid, **fields): a gRPC call of the session; failed(err, sid) / note_lost(err,
  sid) for a failure seen elsewhere (fast path, job socket, completion stream);
- fast_path_address() / lookup_socket(keys): the daemon's fast-path socket, or None (gRPC);
- keep(sid, what, fn): record something to register again, only if sid is still current.
A part hears about the connection through kvstrata.session_part.SessionPart (add_part()).

Lock order: the connection's lock before any part's lock (switched() runs under it).
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
from .heartbeat_counters import HeartbeatCounters
from .jobs import job_tag
from .reconnect import Heartbeat
from .session_part import SessionPart
from .spec import RegisteredNamespace, namespace_spec

log = logging.getLogger("kvstrata")


class Connection:
    """Opens a session on construction; see kvstrata.Session for the arguments
    (on_reconnect here takes no argument). The heartbeat thread starts with start()."""

    def __init__(self, client: Optional[Client] = None, *, endpoint: Optional[str] = None,
                 client_name: str = "kvstrata-python", heartbeat_timeout_ms: int = 0,
                 hostname: Optional[str] = None, pid: Optional[int] = None,
                 token: Optional[str] = None, tls_root_cert: TlsRootCert = None,
                 timeout: Optional[float] = None, auto_reconnect: bool = True,
                 on_reconnect: Optional[Callable[[], Any]] = None,
                 reconnect_backoff: Tuple[float, float] = (0.05, 2.0)) -> None:
        self._owns_client = client is None
        if client is None:
            kwargs = {} if timeout is None else {"timeout": timeout}
            client = Client(endpoint, token=token, tls_root_cert=tls_root_cert, **kwargs)
        self.client = client
        self.last_error: Optional[BaseException] = None
        self._alive = False
        self._closed = False
        # Lookup and job frames on the daemon's fast-path socket (see fast_path.py); False (or
        # KVSTRATA_FAST_PATH=0) to use gRPC only.
        self.fast_path = os.environ.get("KVSTRATA_FAST_PATH", "1") != "0"
        self._fast_sockets: Dict[str, FastPathSocket] = {}
        self._side_sockets: Dict[str, str] = {}  # side_socket(): advertised -> reachable path
        self._parts: List[SessionPart] = []
        self.auto_reconnect = bool(auto_reconnect)
        self.on_reconnect = on_reconnect
        self._heartbeat = Heartbeat(self, reconnect_backoff)
        self.counters = HeartbeatCounters()  # what the heartbeats report (set_provider)
        # Guards open_response (the session id), _connected, _generation and the lists of
        # what to re-register: the heartbeat thread swaps them while callers read them.
        self._lock = threading.RLock()
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

    def add_part(self, part: SessionPart) -> None:
        """Tell `part` about lost, resumed and replaced sessions and the close (in order)."""
        self._parts.append(part)

    def start(self) -> None:
        """Start heart-beating (with a heartbeat deadline); add the parts first."""
        if self.heartbeat_timeout_ms > 0:
            self._heartbeat.start(f"kvstrata-heartbeat-{self.session_id}")

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

    @property
    def reconnect_attempts(self) -> int:
        """Reconnect attempts made (all disconnects together)."""
        return self._heartbeat.attempts

    # ------------------------------------------------------------------ session id

    def sid(self) -> int:
        """The current session id; DaemonUnavailable at once while disconnected."""
        with self._lock:
            if self.auto_reconnect and not self._connected and not self._closed:
                raise DaemonUnavailable(
                    grpc.StatusCode.UNAVAILABLE,
                    f"kvstratad is unreachable or restarted; reconnecting (attempt "
                    f"{self.reconnect_attempts}, last error: {self.last_error})",
                    self.client.endpoint.target)
            return self.open_response.session_id

    def sid_tag(self) -> Tuple[int, int]:
        """sid() and the job-id tag of its generation (kvstrata.jobs.job_tag)."""
        with self._lock:
            return self.sid(), job_tag(self._generation)

    def session_tag(self) -> Tuple[int, int]:
        """The current session id and job-id tag, also while reconnecting."""
        with self._lock:
            return self.open_response.session_id, job_tag(self._generation)

    def keep(self, sid: int, what: str, fn: Callable[[], None]) -> None:
        """fn() under the lock if session sid is still current (it records something to
        register again after a restart), else DaemonUnavailable: sid was replaced meanwhile."""
        with self._lock:
            if sid != self.open_response.session_id:
                raise DaemonUnavailable(grpc.StatusCode.UNAVAILABLE,
                                        f"the session was lost while registering {what}",
                                        self.client.endpoint.target)
            fn()

    def call(self, rpc: str, sid: Optional[int] = None, **fields: Any) -> Any:
        """self.client.<rpc>(session_id=..., **fields); notices a lost daemon or session."""
        if sid is None:
            sid = self.sid()
        try:
            return getattr(self.client, rpc)(session_id=sid, **fields)
        except KVStrataError as err:
            raise self.failed(err, sid) from None

    def failed(self, err: KVStrataError, sid: int) -> KVStrataError:
        """The error to raise for a failed call of session sid (and notice a lost one)."""
        if not self.auto_reconnect or self._closed:
            return err
        gone = session_unknown(err, sid)
        if err.code == grpc.StatusCode.UNAVAILABLE or gone:
            self.note_lost(err, sid)
        if gone:
            return DaemonUnavailable(grpc.StatusCode.UNAVAILABLE,
                                     f"the daemon no longer knows session {sid} (restarted?); "
                                     f"reconnecting: {err.message}", err.endpoint)
        return err

    def note_lost(self, err: BaseException, sid: int, past_deadline: bool = False) -> None:
        """Session sid looks lost (err): disconnect, fail its jobs, wake the heartbeat thread.
        past_deadline: no heartbeat got through within the deadline (the session has ended)."""
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
            if gone or past_deadline:
                self._session_gone = True
            # A daemon behind a Unix socket that refuses connections is gone, and so are its
            # jobs; over TCP, wait for the heartbeat deadline before calling them lost.
            fail_jobs = (self._session_gone or self.client.endpoint.kind == "unix"
                         or self.lost_overdue())
        if fail_jobs:
            self.fail_jobs(f"kvstratad was lost ({err}): recompute these blocks")
        self._heartbeat.wake()

    def lost_overdue(self) -> bool:
        """Lost for longer than the heartbeat deadline (the daemon has dropped the session)."""
        with self._lock:
            return (self._lost_since is not None and time.monotonic() - self._lost_since
                    > self.heartbeat_timeout_ms / 1000.0)

    def fail_jobs(self, reason: str) -> None:
        """Tell every part the session's pending jobs are lost."""
        for part in self._parts:
            part.jobs_lost(reason)

    def mark_dead(self) -> None:
        """The session is lost for good (auto_reconnect=False): `alive` turns False."""
        self._alive = False

    # ------------------------------------------------------------------ calls

    def heartbeat(self) -> Message:
        """One heartbeat now, in the caller's thread, with the counters (raises
        KVStrataError)."""
        sid = self.sid()
        try:
            response = self.send_heartbeat(sid)
        except KVStrataError as err:
            raise self.failed(err, sid) from None
        self._heartbeat.ok()
        return response

    def send_heartbeat(self, sid: int, timeout: Optional[float] = None) -> Message:
        """Heartbeat of session sid with the provider's counters (kvstrata.heartbeat_counters);
        counters the daemon refuses are dropped and the heartbeat sent again without them."""
        counters, absolute = self.counters.report(sid)
        if not counters:
            return self.client.heartbeat(session_id=sid, timeout=timeout)
        try:
            response = self.client.heartbeat(session_id=sid, counters=counters, timeout=timeout)
        except KVStrataError as err:
            if err.code not in (grpc.StatusCode.INVALID_ARGUMENT,
                                grpc.StatusCode.RESOURCE_EXHAUSTED):
                raise
            self.counters.refused(err)
            return self.client.heartbeat(session_id=sid, timeout=timeout)
        self.counters.taken(sid, absolute)
        return response

    def register_namespace(self, spec: Any = None, **spec_fields: Any) -> RegisteredNamespace:
        """Register a namespace; fields as for kvstrata.namespace_spec (engine="vllm", ...).

        The session keeps the spec and registers it again after a daemon restart."""
        spec_msg = namespace_spec(spec, **spec_fields)
        sid = self.sid()
        response = self.call("register_namespace", sid, spec=spec_msg)
        ns = RegisteredNamespace(response.namespace_id, response.fingerprint,
                                 response.bytes_per_block)
        self.keep(sid, "the namespace", lambda: self._namespaces.append((spec_msg, ns)))
        return ns

    # ------------------------------------------------------------------ reconnect

    def reconnect(self, probe_timeout: float) -> bool:
        """One attempt after a loss (heartbeat thread; the daemon answered its health
        check): the same session back (a blip), or a new one with every namespace and
        part's state registered again. False: not yet (try again later) or closed."""
        client = self.client
        with self._lock:
            old, gone = self.open_response, self._session_gone
        if not gone:
            try:
                client.heartbeat(session_id=old.session_id, timeout=probe_timeout)
            except KVStrataError as err:
                self.last_error = err
                if not session_unknown(err, old.session_id):
                    return False
                with self._lock:
                    self._session_gone = True
                self.fail_jobs("kvstratad restarted: recompute these blocks")
            else:
                return self._resume(old.session_id)
        resp = client.open_session(timeout=probe_timeout, **self._open_args)
        try:
            applies, namespaces = self._reregister(resp.session_id)
        except BaseException:
            self._close_quietly(resp.session_id, probe_timeout)
            raise
        with self._lock:
            if self._closed:
                self._close_quietly(resp.session_id, probe_timeout)
                return False
            self.open_response = resp
            for apply in applies:
                apply()
            self._generation += 1
            generation = self._generation
            self._session_gone = False
            self._lost_since = None
            self._heartbeat.ok()
            for part in self._parts:  # Before anyone can call on the new session.
                part.switched(resp.session_id, job_tag(generation))
            self._connected = True
        same = resp.daemon_instance_id == old.daemon_instance_id
        log.warning("kvstrata: reconnected to %s%s: session %d -> %d (generation %d), "
                    "%d namespaces re-registered", client.endpoint.target, "" if same else
                    f" (daemon instance {old.daemon_instance_id} -> {resp.daemon_instance_id})",
                    old.session_id, resp.session_id, generation, namespaces)
        for part in self._parts:
            part.reconnected()
        if self.on_reconnect is not None:
            try:
                self.on_reconnect()
            except Exception:  # noqa: BLE001 - the callback's problem, not the session's
                log.exception("kvstrata: the on_reconnect callback failed")
        return True

    def _resume(self, sid: int) -> bool:
        """The same daemon still knows session sid: connected again."""
        with self._lock:
            if self._closed:
                return False
            self._connected = True
            self._lost_since = None
            self._heartbeat.ok()
            tag = job_tag(self._generation)
        for part in self._parts:
            part.resumed(sid, tag)
        log.warning("kvstrata session %d: reachable again at %s (same session)", sid,
                    self.client.endpoint.target)
        return True

    def _reregister(self, sid: int) -> Tuple[List[Callable[[], None]], int]:
        """Register the session's namespaces, then each part's state, on new session sid:
        what to apply when switching, and how many namespaces were registered. UNAVAILABLE aborts the attempt; other refusals are
        logged and that handle stays stale (its calls then fail)."""
        with self._lock:
            namespaces = list(self._namespaces)
        applies: List[Callable[[], None]] = []
        new_ns_ids: Dict[int, int] = {}
        for spec, ns in namespaces:
            try:
                r = self.client.register_namespace(session_id=sid, spec=spec,
                                                   timeout=self.client.timeout)
            except KVStrataError as err:
                if err.code == grpc.StatusCode.UNAVAILABLE:
                    raise
                self.last_error = err
                log.error("kvstrata: re-registering namespace %s failed: %s", ns.fingerprint, err)
                continue
            applies.append(lambda ns=ns, r=r: ns._update(r.namespace_id, r.fingerprint,
                                                         r.bytes_per_block))
            new_ns_ids[ns.namespace_id] = r.namespace_id
        namespaces = len(applies)
        for part in self._parts:
            apply = part.reregister(sid, new_ns_ids)
            if apply is not None:
                applies.append(apply)
        return applies, namespaces

    def _close_quietly(self, sid: int, timeout: float) -> None:
        try:
            self.client.close_session(session_id=sid, timeout=timeout)
        except KVStrataError:
            pass

    # ------------------------------------------------------------------ side sockets

    def fast_path_address(self) -> Optional[str]:
        """The path of the daemon's fast-path socket, or None (then use gRPC): remote or
        old daemons, or fast_path turned off."""
        if (not self.fast_path or not getattr(self.open_response, "packed_transfers", False)
                or self.client.endpoint.kind != "unix"):
            return None
        return self.side_socket(getattr(self.open_response, "lookup_socket", "")) or None

    def lookup_socket(self, keys: List[bytes]) -> Optional[FastPathSocket]:
        """The lookup connection to the daemon's fast-path socket for these keys, or None
        (then use gRPC): see fast_path_address; also None for no keys or keys of several
        lengths."""
        if not keys or len(set(map(len, keys))) != 1:
            return None
        path = self.fast_path_address()
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
        self._heartbeat.stop()
        for part in self._parts:
            part.close()
        for fast in self._fast_sockets.values():
            fast.close()
        self._heartbeat.join(self.client.timeout + 1.0)
        try:
            if was_connected or not self.auto_reconnect:  # Else there is nothing to close.
                self._last_report()
                self.client.close_session(session_id=self.session_id)
        except KVStrataError as err:  # Gone already (expired, daemon restarted) or unreachable.
            self.last_error = err
        finally:
            self._alive = False
            if self._owns_client:
                self.client.close()

    def _last_report(self) -> None:
        """The counters counted since the last heartbeat, before the session ends with them."""
        if self.counters.report(self.session_id)[0]:
            try:
                self.send_heartbeat(self.session_id)
            except KVStrataError as err:
                log.debug("kvstrata: the last heartbeat before closing failed: %s", err)

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("alive" if self.alive else
                                               ("reconnecting" if self.auto_reconnect else "lost"))
        return (f"kvstrata.Session(id={self.session_id}, {state}, generation {self._generation}, "
                f"{self.client.endpoint})")
