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
"""
from __future__ import annotations

import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Union

import grpc
from google.protobuf.message import Message

from .client import Client, TlsRootCert
from . import pb
from .cuda import (CudaRegistration, IpcEventPool, KvCacheDescription, block_transfers,
                   describe_kv_caches, flatten_tensors)
from .errors import KVStrataError
from .host import (LoadResult, LookupResult, RegionCopier, StoreResult, as_destination,
                   as_source, key_bytes, new_block)
from .jobs import CompletionTracker
from .shm import SharedRegion, SharedRegionError
from .spec import namespace_spec

log = logging.getLogger("kvstrata")


@dataclass(frozen=True)
class RegisteredNamespace:
    """What RegisterNamespace answered for a spec."""

    namespace_id: int
    fingerprint: str
    bytes_per_block: int


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


class Session:
    """Opens a session on construction, heart-beats every third of the daemon's deadline.

    Use as a context manager (or call close()). Heartbeat failures never raise: they are
    kept in `.last_error`, and `.alive` turns False once the session is known to be gone.
    """

    def __init__(self, client: Optional[Client] = None, *, endpoint: Optional[str] = None,
                 client_name: str = "kvstrata-python", heartbeat_timeout_ms: int = 0,
                 hostname: Optional[str] = None, pid: Optional[int] = None,
                 token: Optional[str] = None, tls_root_cert: TlsRootCert = None,
                 timeout: Optional[float] = None) -> None:
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
        self._cuda_registrations: Dict[int, CudaRegistration] = {}
        self._tracker: Optional[CompletionTracker] = None
        self._tracker_lock = threading.Lock()
        try:
            self.open_response: Message = client.open_session(
                client_name=client_name, pid=os.getpid() if pid is None else pid,
                hostname=socket.gethostname() if hostname is None else hostname,
                heartbeat_timeout_ms=heartbeat_timeout_ms)
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
        """False once closed, or once heartbeats show the daemon dropped the session."""
        return self._alive and not self._closed

    @property
    def closed(self) -> bool:
        """True after close()."""
        return self._closed

    # ------------------------------------------------------------------ calls

    def heartbeat(self) -> Message:
        """One heartbeat now, in the caller's thread (raises KVStrataError)."""
        response = self.client.heartbeat(session_id=self.session_id)
        self._last_ok = time.monotonic()
        return response

    def register_namespace(self, spec: Any = None, **spec_fields: Any) -> RegisteredNamespace:
        """Register a namespace; fields as for kvstrata.namespace_spec (engine="vllm", ...)."""
        response = self.client.register_namespace(
            session_id=self.session_id, spec=namespace_spec(spec, **spec_fields))
        return RegisteredNamespace(response.namespace_id, response.fingerprint,
                                   response.bytes_per_block)

    # ------------------------------------------------------------------ host mode

    def shared_region(self) -> SharedRegion:
        """The daemon's shared-memory region for this session, mapped on first use."""
        with self._region_lock:
            if self._closed:
                raise SharedRegionError(grpc.StatusCode.FAILED_PRECONDITION,
                                        "the session is closed")
            if self._region is None or self._region.closed:
                self._region = SharedRegion(self, timeout=self.client.timeout)
            return self._region

    def lookup(self, ns: NamespaceArg, keys: Sequence[bytes], lease: bool = False,
               lease_ttl_ms: int = 0) -> LookupResult:
        """How many leading keys of the chain are present, and where; lease=True pins them
        (until loaded, released or expired) and answers the lease id (0 when no hit)."""
        r = self.client.lookup(session_id=self.session_id, namespace_id=_namespace_id(ns),
                               keys=key_bytes(keys), acquire_lease=lease,
                               lease_ttl_ms=lease_ttl_ms)
        return LookupResult(r.hit_blocks, [loc.tier for loc in r.locations], r.lease_id,
                            r.lease_expires_unix_ms)

    def release_lease(self, lease_id: int) -> None:
        """End a lease from lookup(lease=True) without loading."""
        self.client.release_lease(session_id=self.session_id, lease_id=lease_id)

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
        region = self.shared_region()
        r = self.client.reserve_store(session_id=self.session_id, namespace_id=ns.namespace_id,
                                      keys=keys)
        if len(r.slots) != len(keys):
            if r.reservation_id:
                self._abort_quietly(r.reservation_id)
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
            self._abort_quietly(r.reservation_id)
            raise
        committed = self.client.commit_store(session_id=self.session_id,
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
        region = self.shared_region()
        r = self.client.acquire_load(session_id=self.session_id, namespace_id=ns.namespace_id,
                                     keys=keys, lease_id=lease_id)
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
                    self.client.release_load(session_id=self.session_id, load_id=r.load_id)
                except KVStrataError as err:
                    self.last_error = err
            raise
        if r.load_id:
            self.client.release_load(session_id=self.session_id, load_id=r.load_id)
        return LoadResult(found, blocks)

    # ------------------------------------------------------------------ GPU mode

    def register_cuda_kv_caches(self, ns: NamespaceArg, kv_caches: Any, layout: str, *,
                                num_events: int = 4, tokens_per_block: Optional[int] = None,
                                block_dim: Optional[int] = None, exporter: Any = "driver",
                                timeout: Optional[float] = None) -> CudaRegistration:
        """Register the engine's CUDA KV caches with the daemon (RegisterKvMemory).

        kv_caches / layout / tokens_per_block / block_dim / exporter: as for
        kvstrata.describe_kv_caches ("vllm", "vllm_cross_layer", "sglang"); kv_caches may
        also be a KvCacheDescription from it (layout is then ignored). With the
        RegisteredNamespace, the pieces must add up to its bytes_per_block (ValueError
        before any call otherwise). num_events interprocess CUDA events are created and
        sent along (0 = none: stores then never wait). Returns a CudaRegistration:
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
        self.completions()  # Start watching before the first job exists.
        r = self.client.register_kv_memory(
            session_id=self.session_id, namespace_id=_namespace_id(ns),
            cuda=desc.to_proto(events.handles if events is not None else ()), timeout=timeout)
        reg = CudaRegistration(r.registration_id, _namespace_id(ns), desc, events,
                               flatten_tensors(kv_caches))
        self._cuda_registrations[reg.registration_id] = reg
        return reg

    def unregister_cuda_kv_caches(self, reg: RegistrationArg) -> None:
        """UnregisterKvMemory; the daemon stops using the memory (jobs must be finished)."""
        reg_id = int(reg)
        self.client.unregister_kv_memory(session_id=self.session_id, registration_id=reg_id)
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
        blocks = block_transfers(keys, block_ids, known.num_blocks if known else None)
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
        r = self.client.submit_store(session_id=self.session_id, namespace_id=_namespace_id(ns),
                                     registration_id=int(reg), blocks=blocks, wait_event=wait_event)
        return int(r.job_id)

    def submit_load(self, ns: NamespaceArg, reg: RegistrationArg, keys: Sequence[bytes],
                    block_ids: Sequence[int], lease_id: int = 0) -> int:
        """SubmitLoad: the daemon copies keys[i] into block_ids[i] of the KV cache; job id.

        The completion's failed_blocks lists the indices that were not loaded (missing:
        recompute them); the blocks are usable once the completion arrived. lease_id: a
        lease from lookup(lease=True) covering the keys; it is consumed.
        """
        known = self._registration(reg)
        keys = key_bytes(keys)
        blocks = block_transfers(keys, block_ids, known.num_blocks if known else None)
        r = self.client.submit_load(session_id=self.session_id, namespace_id=_namespace_id(ns),
                                    registration_id=int(reg), blocks=blocks, lease_id=lease_id)
        return int(r.job_id)

    def cancel_job(self, job_id: int) -> bool:
        """CancelJob: True when the job was cancelled before it ran (it still completes)."""
        return bool(self.client.cancel_job(session_id=self.session_id, job_id=job_id).cancelled)

    def completions(self) -> CompletionTracker:
        """The session's CompletionTracker; its WatchCompletions stream opens on first use."""
        with self._tracker_lock:
            if self._tracker is None:
                self._tracker = CompletionTracker(self.client, self.session_id)
            tracker = self._tracker
        tracker.start()
        return tracker

    def poll_completions(self, max_completions: int = 0) -> List[Any]:
        """Every job completion not yet handed out: one PollCompletions RPC plus what the
        completion stream delivered (kvstrata.pb.JobCompletion messages)."""
        return self.completions().poll(max_completions)

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

    def _abort_quietly(self, reservation_id: int) -> None:
        try:
            self.client.commit_store(session_id=self.session_id, reservation_id=reservation_id,
                                     abort=True)
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
        self._closed = True
        self._stop.set()
        self._close_region()
        with self._tracker_lock:
            tracker, self._tracker = self._tracker, None
        if tracker is not None:
            tracker.close()
        self._cuda_registrations.clear()  # The daemon drops them with the session.
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=self.client.timeout + 1.0)
        try:
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
        state = "closed" if self._closed else ("alive" if self._alive else "lost")
        return f"kvstrata.Session(id={self.session_id}, {state}, {self.client.endpoint})"

    # ------------------------------------------------------------------ heartbeat thread

    def _heartbeat_loop(self) -> None:
        timeout_s = self.heartbeat_timeout_ms / 1000.0
        interval = timeout_s / 3.0
        while not self._stop.wait(interval):
            try:
                self.client.heartbeat(session_id=self.session_id, timeout=max(interval, 0.05))
                self._last_ok = time.monotonic()
            except Exception as err:  # Never let anything escape this thread.
                self.last_error = err
                gone = isinstance(err, KVStrataError) and err.code == grpc.StatusCode.NOT_FOUND
                if gone or time.monotonic() - self._last_ok > timeout_s:
                    if not self._stop.is_set():
                        log.warning("kvstrata session %d lost: %s", self.session_id, err)
                    self._alive = False
                    return
