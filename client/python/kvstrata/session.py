"""Session: an open daemon session kept alive by a background heartbeat thread.

Everything a session creates on the daemon (namespace registrations, leases, reservations,
loads, jobs) ends when it closes or stops heart-beating, so a crashed client never leaks
daemon resources.

Host mode (the engine copies bytes itself through the daemon's shared-memory region):
lookup() / release_lease(), store() and load(); the region is mapped on first use
(shared_region()) and unmapped by close().

GPU mode (the daemon copies between the engine's CUDA KV cache and its tiers):
register_cuda_kv_caches(), submit_store() / submit_load() answering job ids, and
poll_completions() / take_completions() / wait_jobs() fed by a WatchCompletions stream
(see kvstrata.cuda and kvstrata.jobs). torch is imported only by register_cuda_kv_caches.

Daemon restarts (auto_reconnect=True, the default): a restarted daemon knows nothing of the
session. The heartbeat thread notices (UNAVAILABLE, NOT_FOUND for the session, or a failed
call noticed by a caller thread), then tries, with capped exponential back-off, to open a
new session on the same endpoint. It re-registers every namespace and CUDA KV-cache
registration of the session and updates the RegisteredNamespace / CudaRegistration objects
in place, so the caller's handles stay valid; the host-mode region is mapped again. Jobs of
the lost session are reported failed (every block in failed_blocks). Meanwhile calls raise
DaemonUnavailable at once and `connected` is False; `generation` counts the reconnects.
"""
from __future__ import annotations

import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import grpc
from google.protobuf.message import Message

from .client import Client, TlsRootCert
from . import pb
from .cuda import (CudaRegistration, IpcEventPool, KvCacheDescription, LayerFlags,
                   block_transfers, checked_block_ids, describe_kv_caches, flatten_tensors)
from .errors import DaemonUnavailable, KVStrataError
from .fast_path import KIND_LOAD, KIND_STORE, FastPathSocket, NotSpoken
from .host import (LoadResult, LookupResult, RegionCopier, StoreResult, as_destination,
                   as_source, key_bytes, new_block)
from .jobs import JOB_TAG_MASK, CompletionTracker, job_tag
from .shm import SharedRegion, SharedRegionError
from .spec import namespace_spec
from .tier import Tier

log = logging.getLogger("kvstrata")


@dataclass(frozen=True)
class RegisteredNamespace:
    """What RegisterNamespace answered for a spec.

    After a daemon restart the Session re-registers the spec and updates namespace_id in
    place (the fingerprint stays the same), so keep and pass this object, not the id.
    """

    namespace_id: int
    fingerprint: str
    bytes_per_block: int

    def __hash__(self) -> int:  # Stable across the in-place update of namespace_id.
        return hash((self.fingerprint, self.bytes_per_block))

    def _update(self, namespace_id: int, fingerprint: str, bytes_per_block: int) -> None:
        object.__setattr__(self, "namespace_id", int(namespace_id))
        object.__setattr__(self, "fingerprint", fingerprint)
        object.__setattr__(self, "bytes_per_block", int(bytes_per_block))


NamespaceArg = Union[RegisteredNamespace, int]
RegistrationArg = Union[CudaRegistration, int]


def _namespace_id(ns: NamespaceArg) -> int:
    if isinstance(ns, RegisteredNamespace):
        return ns.namespace_id
    if isinstance(ns, int) and not isinstance(ns, bool):
        return ns
    raise TypeError(f"expected the RegisteredNamespace from register_namespace(), got {type(ns).__name__}")


def _block_bytes(ns: Any) -> int:
    if not isinstance(ns, RegisteredNamespace):
        raise TypeError("store/load need the RegisteredNamespace from register_namespace() "
                        f"(it carries bytes_per_block), got {type(ns).__name__}")
    return ns.bytes_per_block


def _session_unknown(err: BaseException, session_id: int) -> bool:
    """True for the daemon's NOT_FOUND "session <id> is unknown or has ended"."""
    return (isinstance(err, KVStrataError) and err.code == grpc.StatusCode.NOT_FOUND
            and f"session {session_id} " in err.message)


class Session:
    """Opens a session on construction, heart-beats every third of the daemon's deadline.

    Use as a context manager (or call close()). Heartbeat failures never raise: they are
    kept in `.last_error`, and `.alive` turns False while the session is known to be gone.

    auto_reconnect (default True): survive daemon restarts (see the module docstring).
    on_reconnect(session) is called in the heartbeat thread after each reconnect, once
    everything was re-registered. reconnect_backoff: (first, longest) delay in seconds
    between reconnect attempts. With auto_reconnect=False a lost session stays lost.
    """

    def __init__(self, client: Optional[Client] = None, *, endpoint: Optional[str] = None,
                 client_name: str = "kvstrata-python", heartbeat_timeout_ms: int = 0,
                 hostname: Optional[str] = None, pid: Optional[int] = None,
                 token: Optional[str] = None, tls_root_cert: TlsRootCert = None,
                 timeout: Optional[float] = None, auto_reconnect: bool = True,
                 on_reconnect: Optional[Callable[["Session"], Any]] = None,
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
        self._region: Optional[SharedRegion] = None
        self._region_lock = threading.Lock()
        self._region_used = False  # mapped once: mapped again right after a reconnect
        self._cuda_registrations: Dict[int, CudaRegistration] = {}
        # Lookup and job frames on the daemon's fast-path socket (see fast_path.py); False (or
        # KVSTRATA_FAST_PATH=0) to use gRPC only.
        self.fast_path = os.environ.get("KVSTRATA_FAST_PATH", "1") != "0"
        self._fast_sockets: Dict[str, FastPathSocket] = {}
        self._side_sockets: Dict[str, str] = {}  # side_socket(): advertised -> reachable path
        self._tracker: Optional[CompletionTracker] = None
        self._tracker_lock = threading.Lock()
        self._events_next_seq = 0
        self.events_truncated = False
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

    def _sid_tag(self) -> Tuple[int, int]:
        with self._lock:
            return self._sid(), job_tag(self._generation)

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
        gone = _session_unknown(err, sid)
        if err.code == grpc.StatusCode.UNAVAILABLE or gone:
            self._note_lost(err, sid)
        if gone:
            return DaemonUnavailable(grpc.StatusCode.UNAVAILABLE,
                                     f"the daemon no longer knows session {sid} (restarted?); "
                                     f"reconnecting: {err.message}", err.endpoint)
        return err

    def _note_lost(self, err: BaseException, sid: int) -> None:
        """Session sid looks lost (err): disconnect, fail its jobs, wake the heartbeat thread."""
        gone = _session_unknown(err, sid)
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

    def _fail_jobs(self, reason: str) -> None:
        with self._tracker_lock:
            tracker = self._tracker
        if tracker is not None:
            n = tracker.fail_pending(reason)
            if n:
                log.info("kvstrata: %d pending jobs reported failed: %s", n, reason)

    @property
    def closed(self) -> bool:
        """True after close()."""
        return self._closed

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
        with self._lock:
            if sid != self.open_response.session_id:  # Lost meanwhile: not re-registered.
                raise DaemonUnavailable(grpc.StatusCode.UNAVAILABLE,
                                        "the session was lost while registering the namespace",
                                        self.client.endpoint.target)
            self._namespaces.append((spec_msg, ns))
        return ns

    # ------------------------------------------------------------------ host mode

    def shared_region(self) -> SharedRegion:
        """The daemon's shared-memory region for this session, mapped on first use."""
        with self._region_lock:
            if self._closed:
                raise SharedRegionError(grpc.StatusCode.FAILED_PRECONDITION,
                                        "the session is closed")
            if self._region is None or self._region.closed:
                self._region = SharedRegion(self, timeout=self.client.timeout)
                self._region_used = True
            return self._region

    def lookup(self, ns: NamespaceArg, keys: Sequence[bytes], lease: bool = False,
               lease_ttl_ms: int = 0) -> LookupResult:
        """How many leading keys of the chain are present, and where; lease=True pins them
        (until loaded, released or expired) and answers the lease id (0 when no hit)."""
        keys = key_bytes(keys)
        fast = self._fast_socket(keys)
        if fast is not None:
            sid = self._sid()
            try:
                hits, tiers, lease_id, expires = fast.lookup(sid, _namespace_id(ns), keys,
                                                             lease, lease_ttl_ms)
                return LookupResult(hits, Tier.of_all(tiers), lease_id, expires, fast=True)
            except NotSpoken:
                self.fast_path = False  # Then through gRPC below.
            except KVStrataError as err:
                raise self._failed(err, sid) from None
        r = self._call("lookup", namespace_id=_namespace_id(ns), keys=keys,
                       acquire_lease=lease, lease_ttl_ms=lease_ttl_ms)
        return LookupResult(r.hit_blocks, Tier.of_all(loc.tier for loc in r.locations),
                            r.lease_id, r.lease_expires_unix_ms)

    def _fast_socket(self, keys: List[bytes]) -> Optional[FastPathSocket]:
        """The daemon's fast-path socket for these keys, or None (then use gRPC): remote or
        old daemons, keys of several lengths, or fast_path turned off."""
        if (not self.fast_path or not keys or self.client.endpoint.kind != "unix"
                or not getattr(self.open_response, "packed_transfers", False)
                or len(set(map(len, keys))) != 1):
            return None
        path = self.side_socket(getattr(self.open_response, "lookup_socket", ""))
        if not path:
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

    def release_lease(self, lease_id: int) -> None:
        """End a lease from lookup(lease=True) without loading."""
        self._call("release_lease", lease_id=lease_id)

    def store(self, ns: RegisteredNamespace, keys: Sequence[bytes],
              blocks: Sequence[Any]) -> StoreResult:
        """Store one block per key: reserve slots, copy each block once into its slot, commit.

        blocks: bytes-like objects, numpy arrays or CPU torch tensors of exactly
        ns.bytes_per_block bytes each (ValueError before any call otherwise). Keys already
        present are skipped; keys the daemon drops (pool pressure, admission) are counted,
        not raised. If copying fails, the reservation is aborted and the error re-raised.
        """
        nbytes = _block_bytes(ns)
        keys = key_bytes(keys)
        blocks = list(blocks)
        if len(blocks) != len(keys):
            raise ValueError(f"store: {len(keys)} keys but {len(blocks)} blocks")
        sources = [as_source(b, nbytes, i) for i, b in enumerate(blocks)]
        if not keys:
            return StoreResult()
        sid = self._sid()
        region = self.shared_region()
        r = self._call("reserve_store", sid, namespace_id=ns.namespace_id, keys=keys)
        if len(r.slots) != len(keys):
            if r.reservation_id:
                self._abort_quietly(r.reservation_id, sid)
            raise KVStrataError(grpc.StatusCode.INTERNAL,
                                f"ReserveStore answered {len(r.slots)} slots for {len(keys)} keys",
                                self.client.endpoint.target)
        slot = pb.SlotRef
        reserved = [i for i, s in enumerate(r.slots) if s.state == slot.STATE_RESERVED]
        present = sum(1 for s in r.slots if s.state == slot.STATE_ALREADY_PRESENT)
        dropped = len(keys) - len(reserved) - present
        if not reserved or not r.reservation_id:
            return StoreResult(0, present, dropped)
        try:
            with RegionCopier(region) as copier:
                for i in reserved:
                    s = r.slots[i]
                    if s.length != nbytes:
                        raise KVStrataError(
                            grpc.StatusCode.INTERNAL,
                            f"slot {i} is {s.length} bytes; the namespace's blocks have {nbytes}",
                            self.client.endpoint.target)
                    copier.to_slot(sources[i], s.offset, s.length)
        except BaseException:
            self._abort_quietly(r.reservation_id, sid)
            raise
        committed = self._call("commit_store", sid,
                               reservation_id=r.reservation_id).committed_blocks
        return StoreResult(committed, present, dropped + len(reserved) - committed)

    def load(self, ns: RegisteredNamespace, keys: Sequence[bytes],
             out: Optional[Sequence[Any]] = None, lease_id: int = 0) -> LoadResult:
        """Copy each present key's block out of the shared region, then release the slots.

        out: one writable buffer per key (bytearray, numpy array, CPU torch tensor) of
        ns.bytes_per_block bytes; None = new numpy uint8 arrays. lease_id: a lease from
        lookup(lease=True) covering the keys; it is consumed. Returns a LoadResult: one bool
        per key (False = missing, recompute it); `.blocks` holds the filled buffers.
        """
        nbytes = _block_bytes(ns)
        keys = key_bytes(keys)
        if out is not None:
            out = list(out)
            if len(out) != len(keys):
                raise ValueError(f"load: {len(keys)} keys but {len(out)} output buffers")
            targets: List[Any] = [as_destination(o, nbytes, i) for i, o in enumerate(out)]
        if not keys:
            return LoadResult([], [])
        sid = self._sid()
        region = self.shared_region()
        r = self._call("acquire_load", sid, namespace_id=ns.namespace_id, keys=keys,
                       lease_id=lease_id)
        found = [False] * len(keys)
        blocks: List[Any] = [None] * len(keys)
        try:
            if len(r.slots) != len(keys):
                raise KVStrataError(grpc.StatusCode.INTERNAL,
                                    f"AcquireLoad answered {len(r.slots)} slots for {len(keys)} keys",
                                    self.client.endpoint.target)
            with RegionCopier(region) as copier:
                for i, s in enumerate(r.slots):
                    if s.state != pb.SlotRef.STATE_READY:
                        continue
                    if s.length != nbytes:
                        raise KVStrataError(
                            grpc.StatusCode.INTERNAL,
                            f"slot {i} is {s.length} bytes; the namespace's blocks have {nbytes}",
                            self.client.endpoint.target)
                    if out is None:
                        blocks[i] = new_block(nbytes)
                        copier.from_slot(as_destination(blocks[i], nbytes, i), s.offset, s.length)
                    else:
                        copier.from_slot(targets[i], s.offset, s.length)
                        blocks[i] = out[i]
                    found[i] = True
        except BaseException:
            if r.load_id:  # The copy failed: release, but let the original error win.
                try:
                    self._call("release_load", sid, load_id=r.load_id)
                except KVStrataError as err:
                    self.last_error = err
            raise
        if r.load_id:
            self._call("release_load", sid, load_id=r.load_id)
        return LoadResult(found, blocks)

    # ------------------------------------------------------------------ GPU mode

    def register_cuda_kv_caches(self, ns: NamespaceArg, kv_caches: Any, layout: str, *,
                                num_events: int = 4, tokens_per_block: Optional[int] = None,
                                block_dim: Optional[int] = None, exporter: Any = "driver",
                                layer_flags: bool = False,
                                timeout: Optional[float] = None) -> CudaRegistration:
        """Register the engine's CUDA KV caches with the daemon (RegisterKvMemory).

        kv_caches / layout / tokens_per_block / block_dim / exporter: as for
        kvstrata.describe_kv_caches ("vllm", "vllm_cross_layer", "sglang"); kv_caches may
        also be a KvCacheDescription from it (layout is then ignored). With the
        RegisteredNamespace, the pieces must add up to its bytes_per_block (ValueError
        before any call otherwise). num_events interprocess CUDA events are created and
        sent along (0 = none: stores then never wait). layer_flags: also one GPU word per
        layer (`reg.layer_flags`, a LayerFlags), for layer-wise loads
        (submit_load(..., layer_flag_value=...)). Returns a CudaRegistration:
        `.registration_id`, `.record_event()`, `.description`; it keeps the tensors alive.
        Also opens the session's completion stream, before any job can be submitted.
        """
        block_bytes = ns.bytes_per_block if isinstance(ns, RegisteredNamespace) else None
        if isinstance(kv_caches, KvCacheDescription):  # Described already.
            desc = kv_caches
            if block_bytes is not None and desc.block_bytes != block_bytes:
                raise ValueError(f"the description's blocks have {desc.block_bytes} bytes but "
                                 f"the namespace has {block_bytes} bytes_per_block")
        else:
            desc = describe_kv_caches(kv_caches, layout, block_bytes,
                                      tokens_per_block=tokens_per_block, block_dim=block_dim,
                                      exporter=exporter)
        events = IpcEventPool(desc.device_index, num_events) if num_events else None
        flags = (LayerFlags(desc.device_index, [p.layer for p in desc.pieces], exporter)
                 if layer_flags else None)
        sid = self._sid()
        self.completions()  # Start watching before the first job exists.
        r = self._call("register_kv_memory", sid, namespace_id=_namespace_id(ns),
                       cuda=desc.to_proto(events.handles if events is not None else (),
                                          flags.to_proto() if flags is not None else None),
                       timeout=timeout)
        reg = CudaRegistration(r.registration_id, _namespace_id(ns), desc, events,
                               flatten_tensors(kv_caches), flags)
        with self._lock:
            if sid != self.open_response.session_id:
                raise DaemonUnavailable(grpc.StatusCode.UNAVAILABLE,
                                        "the session was lost while registering the KV caches",
                                        self.client.endpoint.target)
            self._cuda_registrations[reg.registration_id] = reg
        return reg

    def unregister_cuda_kv_caches(self, reg: RegistrationArg) -> None:
        """UnregisterKvMemory; the daemon stops using the memory (jobs must be finished)."""
        reg_id = int(reg)
        self._call("unregister_kv_memory", registration_id=reg_id)
        with self._lock:
            known = self._cuda_registrations.pop(reg_id, None)
        if known is not None:
            known.unregistered = True

    def cuda_registration(self, registration_id: int) -> Optional[CudaRegistration]:
        """The CudaRegistration this session made with that id, if any."""
        return self._cuda_registrations.get(int(registration_id))

    def _registration(self, reg: RegistrationArg) -> Optional[CudaRegistration]:
        if isinstance(reg, CudaRegistration):
            return reg
        if isinstance(reg, bool) or not isinstance(reg, int):
            raise TypeError(f"expected a CudaRegistration or a registration id, got {type(reg).__name__}")
        return self._cuda_registrations.get(reg)

    def submit_store(self, ns: NamespaceArg, reg: RegistrationArg, keys: Sequence[bytes],
                     block_ids: Sequence[int], event: Union[None, bool, int] = None) -> int:
        """SubmitStore: the daemon copies block_ids[i] of the KV cache to keys[i]; job id.

        event: None (no wait), True (record an IPC event of the registration now, on the
        current stream, and wait for it) or the value reg.record_event() answered (1 +
        the event's index). The store's outcome arrives as a JobCompletion.
        """
        known = self._registration(reg)
        keys = key_bytes(keys)
        blocks = self._job_blocks(keys, block_ids, known)
        if event is None or event is False:
            wait_event = 0
        elif event is True:
            if known is None:
                raise ValueError("event=True needs the CudaRegistration (it owns the events)")
            wait_event = known.record_event()
        elif isinstance(event, int):
            wait_event = event
            pool = len(known.events) if known is not None and known.events is not None else None
            if wait_event < 0 or (pool is not None and wait_event > pool):
                raise ValueError(f"event {event} is out of range: 0 (none) or 1..{pool} "
                                 "(the value record_event() answered)")
        else:
            raise TypeError(f"event must be None, True or an int, got {type(event).__name__}")
        sid, tag = self._sid_tag()
        job_id = self._submit_fast(KIND_STORE, sid, ns, reg, keys, blocks, event=wait_event)
        if job_id is None:
            job_id = int(self._call("submit_store", sid, namespace_id=_namespace_id(ns),
                                    registration_id=int(reg), wait_event=wait_event,
                                    **blocks).job_id)
        return self._expect(job_id, tag, pb.JobCompletion.KIND_STORE, len(keys))

    def submit_load(self, ns: NamespaceArg, reg: RegistrationArg, keys: Sequence[bytes],
                    block_ids: Sequence[int], lease_id: int = 0,
                    layer_flag_value: int = 0) -> int:
        """SubmitLoad: the daemon copies keys[i] into block_ids[i] of the KV cache; job id.

        The completion's failed_blocks lists the indices that were not loaded (missing:
        recompute them); the blocks are usable once the completion arrived. lease_id: a
        lease from lookup(lease=True) covering the keys; it is consumed.
        layer_flag_value (> 0; a registration made with layer_flags=True, value from
        `reg.layer_flags.next_value()`): a layer-wise load. The daemon copies layer by layer
        and writes the value into each layer's word once it landed;
        `reg.layer_flags.wait(layer, value)` makes a stream wait for that (on the GPU, right
        after this returns). Only blocks in L1 are loaded (the others fail at once, nothing
        is read from disk). The completion still reports the outcome: blocks it lists
        failed hold garbage, and if it never comes (the daemon died) release(value) lets
        the waiting streams go on.
        """
        known = self._registration(reg)
        keys = key_bytes(keys)
        blocks = self._job_blocks(keys, block_ids, known)
        if layer_flag_value and (known is None or known.layer_flags is None):
            raise ValueError("layer_flag_value needs a registration made with "
                             "register_cuda_kv_caches(..., layer_flags=True)")
        sid, tag = self._sid_tag()
        job_id = self._submit_fast(KIND_LOAD, sid, ns, reg, keys, blocks,
                                   event=layer_flag_value, lease_id=lease_id)
        if job_id is None:
            job_id = int(self._call("submit_load", sid, namespace_id=_namespace_id(ns),
                                    registration_id=int(reg), lease_id=lease_id,
                                    layer_flag_value=layer_flag_value, **blocks).job_id)
        return self._expect(job_id, tag, pb.JobCompletion.KIND_LOAD, len(keys))

    def _submit_fast(self, kind: int, sid: int, ns: NamespaceArg, reg: RegistrationArg,
                     keys: List[bytes], blocks: dict, event: int = 0,
                     lease_id: int = 0) -> Optional[int]:
        """The job id from a job frame on the daemon's fast-path socket; None when that path
        does not apply (see fast_path): then the caller submits through gRPC."""
        socket_ = self._fast_socket(keys) if "block_ids" in blocks else None
        if socket_ is None:
            return None
        try:
            return socket_.submit(kind, sid, _namespace_id(ns), int(reg), keys,
                                  blocks["block_ids"], event, lease_id)
        except NotSpoken:
            self.fast_path = False
            return None
        except KVStrataError as err:
            raise self._failed(err, sid) from None

    def _job_blocks(self, keys: List[bytes], block_ids: Any,
                    known: Optional[CudaRegistration]) -> dict:
        """The request fields naming a job's blocks: parallel arrays when the daemon reads
        them (OpenSessionResponse.packed_transfers), else one BlockTransfer per block."""
        num_blocks = known.num_blocks if known else None
        if getattr(self.open_response, "packed_transfers", False):
            return {"keys": keys, "block_ids": checked_block_ids(keys, block_ids, num_blocks)}
        return {"blocks": block_transfers(keys, block_ids, num_blocks)}

    def _expect(self, daemon_job_id: int, tag: int, kind: int, num_blocks: int) -> int:
        """The job id handed to the caller (tagged with the generation) and tracked as pending."""
        job_id = daemon_job_id | tag
        self.completions().expect(job_id, kind, num_blocks, tag)
        return job_id

    def cancel_job(self, job_id: int) -> bool:
        """CancelJob: True when the job was cancelled before it ran (it still completes).

        False for a job of a session lost to a daemon restart (it was reported failed)."""
        job_id = int(job_id)
        sid, tag = self._sid_tag()
        if job_id & JOB_TAG_MASK != tag:
            return False
        return bool(self._call("cancel_job", sid, job_id=job_id & ~JOB_TAG_MASK).cancelled)

    def completions(self) -> CompletionTracker:
        """The session's CompletionTracker; its WatchCompletions stream opens on first use."""
        with self._tracker_lock:
            if self._tracker is None:
                with self._lock:
                    sid, tag = self.open_response.session_id, job_tag(self._generation)
                self._tracker = CompletionTracker(
                    self.client, sid, on_lost=self._on_tracker_lost if self.auto_reconnect else None,
                    tag=tag)
            tracker = self._tracker
        if self._connected or not self.auto_reconnect:
            tracker.start()
        return tracker

    def _on_tracker_lost(self, err: BaseException, session_id: int) -> None:
        if isinstance(err, KVStrataError) and (err.code == grpc.StatusCode.UNAVAILABLE
                                               or _session_unknown(err, session_id)):
            self._note_lost(err, session_id)

    def poll_completions(self, max_completions: int = 0) -> List[Any]:
        """Every job completion not yet handed out: one PollCompletions RPC plus what the
        completion stream delivered (kvstrata.pb.JobCompletion messages).

        While reconnecting after a daemon restart: no RPC, the completions at hand (among
        them the failures of the lost session's jobs)."""
        tracker = self.completions()
        if self.auto_reconnect and not self._connected:
            return list(tracker.take().values())
        try:
            return tracker.poll(max_completions)
        except KVStrataError as err:
            if not self.auto_reconnect or err.code not in (grpc.StatusCode.UNAVAILABLE,
                                                           grpc.StatusCode.NOT_FOUND):
                raise
            self._on_tracker_lost(err, tracker.session_id)
            if self._connected:
                raise
            return list(tracker.take().values())

    def poll_events(self, ns: Optional[NamespaceArg] = None, max_batches: int = 0) -> List[Any]:
        """KV event batches (kvstrata.pb.KvEventBatch) published since the previous call,
        optionally only those of namespace `ns`: what a connector's take_events() returns.
        The cursor is kept per session; after a gap (buffer overrun, daemon restart)
        `events_truncated` is True until the next call."""
        nsid = 0 if ns is None else _namespace_id(ns)
        response = self._call("poll_events", from_seq=self._events_next_seq,
                              max_batches=max_batches, namespace_id=nsid)
        self._events_next_seq = response.next_seq
        self.events_truncated = bool(response.truncated)
        return list(response.batches)

    def take_completions(self) -> Dict[int, Any]:
        """Completions the stream delivered so far, by job id; no RPC, never blocks."""
        return self.completions().take()

    def wait_jobs(self, job_ids: Sequence[int], timeout: Optional[float] = None) -> Dict[int, Any]:
        """Block until the jobs completed; their JobCompletions by job id (taken).

        TimeoutError when timeout seconds pass first. Check `.ok` / `.failed_blocks`.
        """
        return self.completions().wait(job_ids, timeout)

    def wait_job(self, job_id: int, timeout: Optional[float] = None) -> Any:
        """wait_jobs for one job: its JobCompletion."""
        return self.wait_jobs([job_id], timeout)[int(job_id)]

    def _abort_quietly(self, reservation_id: int, sid: int) -> None:
        try:
            self.client.commit_store(session_id=sid, reservation_id=reservation_id, abort=True)
        except KVStrataError as err:  # The session's end reclaims the slots anyway.
            self.last_error = err
            log.warning("kvstrata: aborting reservation %d failed: %s", reservation_id, err)

    def _close_region(self) -> None:
        with self._region_lock:
            region, self._region = self._region, None
        if region is not None:
            try:
                region.close()
            except BufferError as err:  # Views still alive: the mapping ends with them.
                log.warning("kvstrata: %s", err)

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
        self._close_region()
        with self._tracker_lock:
            tracker, self._tracker = self._tracker, None
        if tracker is not None:
            tracker.close()
        self._cuda_registrations.clear()  # The daemon drops them with the session.
        for job_socket in self._fast_sockets.values():
            job_socket.close()
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

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("alive" if self.alive else
                                               ("reconnecting" if self.auto_reconnect else "lost"))
        return (f"kvstrata.Session(id={self.session_id}, {state}, generation {self._generation}, "
                f"{self.client.endpoint})")

    # ------------------------------------------------------------------ heartbeat thread

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
                if not _session_unknown(err, old.session_id):
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
            regs: Dict[int, CudaRegistration] = {}
            for reg, new_reg_id, new_ns_id in reg_updates:
                reg.registration_id = int(new_reg_id)
                reg.namespace_id = int(new_ns_id)
                regs[reg.registration_id] = reg
            self._cuda_registrations = regs
            self._generation += 1
            generation = self._generation
            self._session_gone = False
            self._lost_since = None
            self._last_ok = time.monotonic()
            with self._tracker_lock:
                tracker = self._tracker
            if tracker is not None:  # Before anyone can submit on the new session.
                tracker.rebind(resp.session_id, job_tag(generation))
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
            registrations = [r for r in self._cuda_registrations.values() if not r.unregistered]
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
        reg_updates: List[Tuple[CudaRegistration, int, int]] = []
        for reg in registrations:
            ns_id = new_ns_ids.get(reg.namespace_id)
            if ns_id is None:
                log.error("kvstrata: CUDA registration %d is not re-registered: its namespace "
                          "%d was not registered through this session (or failed)",
                          reg.registration_id, reg.namespace_id)
                continue
            events = reg.events.handles if reg.events is not None else ()
            try:
                r = self.client.register_kv_memory(session_id=sid, namespace_id=ns_id,
                                                   cuda=reg.description.to_proto(events),
                                                   timeout=timeout)
            except KVStrataError as err:
                if err.code == grpc.StatusCode.UNAVAILABLE:
                    raise
                self.last_error = err
                log.error("kvstrata: re-registering CUDA registration %d failed: %s",
                          reg.registration_id, err)
                continue
            reg_updates.append((reg, r.registration_id, ns_id))
        return ns_updates, reg_updates

    def _restart_stream(self) -> None:
        with self._tracker_lock:
            tracker = self._tracker
        if tracker is not None and not tracker.watching:
            with self._lock:
                sid, tag = self.open_response.session_id, job_tag(self._generation)
            tracker.rebind(sid, tag, fail=False)
