"""GPU I/O: the engine's CUDA KV caches registered with the daemon, and the store and load
jobs the daemon runs on them.

The part of kvstrata.Session for GPU engines: register_cuda_kv_caches() sends the CUDA IPC
handles of the KV tensors' pieces (kvstrata.kv_pieces; kvstrata.cuda describes them for the
daemon), submit_store() / submit_load() answer job ids, cancel_job().

A submit goes as a job frame on the daemon's fast-path socket when it can (a Unix
endpoint, a daemon that announces packed_transfers, keys of one length, fast_path on):
the call returns once the frame is written, with a job id made by the client
(kvstrata.job_ids), without waiting for the daemon's answer (kvstrata.job_socket). A
refusal in that answer (unknown registration, bad block ids, a full pool, ...) arrives as
the job's failed completion: ok False, every block in failed_blocks, the daemon's message
in `error`; so does a connection that broke before the answer was read. Otherwise the
submit goes through gRPC, waits for the daemon and raises its refusals, as before.
Their completions arrive through kvstrata.jobs (SessionJobs): a job frame's on the job
socket itself where the daemon offers it (socket_completions: read by the thread waiting
for them, or else the job socket's reader thread, instead of a gRPC stream message), else on
the WatchCompletions stream. A reconnect registers the
kept descriptions again on the new session (no CUDA call: the heartbeat thread has no CUDA
context). torch is imported only by register_cuda_kv_caches.

GpuIO is given the session's kvstrata.connection.Connection (session id, gRPC calls, the
fast-path socket's address) and its kvstrata.jobs.SessionJobs (where each job is tracked);
it hears of replaced sessions as a kvstrata.session_part.SessionPart.
"""
from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import grpc

from . import pb
from .connection import Connection
from .cuda import (CudaRegistration, IpcEventPool, KvCacheDescription, LayerFlags,
                   block_transfers, checked_block_ids, describe_pieces)
from .errors import DaemonUnavailable, KVStrataError
from .fast_path import (STATUS_CODES, KIND_LOAD, KIND_STORE, VERSION, VERSION_COMPLETIONS,
                        NotSpoken, SocketCompletion, job_frame, packed_keys)
from .host import key_bytes, key_list
from .job_ids import client_job_id, is_client_job_id, job_counter
from .job_socket import JobSocket, Reading, SentJob
from .jobs import JOB_TAG_MASK, SessionJobs
from .kv_pieces import TensorPiece
from .session_part import SessionPart
from .spec import NamespaceArg, RegisteredNamespace, namespace_id

log = logging.getLogger("kvstrata")

RegistrationArg = Union[CudaRegistration, int]


class GpuIO(SessionPart):
    """CUDA KV-cache registrations and GPU store/load jobs of a kvstrata.Session."""

    def __init__(self, conn: Connection, jobs: SessionJobs) -> None:
        self._conn = conn
        self._jobs = jobs
        jobs.reader = self.completion_reader
        # Guards _cuda_registrations and _job_sockets (after the connection's lock).
        self._lock = threading.Lock()
        self._cuda_registrations: Dict[int, CudaRegistration] = {}
        self._job_sockets: Dict[str, JobSocket] = {}   # by path: one (the daemon's) at a time
        self._job_numbers = job_counter()

    def close(self) -> None:
        self._cuda_registrations.clear()  # The daemon drops them with the session.
        for jobs in list(self._job_sockets.values()):
            jobs.close()

    # ------------------------------------------------------------------ registration

    def register_cuda_kv_caches(self, ns: NamespaceArg,
                                pieces: Union[Sequence[TensorPiece], KvCacheDescription], *,
                                num_events: int = 4, exporter: Any = "driver",
                                layer_flags: bool = False,
                                timeout: Optional[float] = None) -> CudaRegistration:
        """Register the engine's CUDA KV caches with the daemon (RegisterKvMemory).

        pieces: the KV tensors as kvstrata.TensorPiece objects, in a block's byte order
        (kvstrata.tensor_pieces, or the engine's layout in its connector:
        kvstrata_vllm.kv_layouts, kvstrata_sglang.device_pool), or a KvCacheDescription
        made from them (kvstrata.describe_pieces). exporter: as for describe_pieces. With
        the RegisteredNamespace, the pieces must add up to its bytes_per_block (ValueError
        before any call otherwise). num_events interprocess CUDA events are created and
        sent along (0 = none: stores then never wait). layer_flags: also one GPU word per
        layer (`reg.layer_flags`, a LayerFlags), for layer-wise loads
        (submit_load(..., layer_flag_value=...)). Returns a CudaRegistration:
        `.registration_id`, `.record_event()`, `.description`; it keeps the pieces' tensors
        alive. Also opens the session's completion stream, before any job can be submitted.
        """
        block_bytes = ns.bytes_per_block if isinstance(ns, RegisteredNamespace) else None
        tensors: List[Any] = []
        if isinstance(pieces, KvCacheDescription):  # Described already.
            desc = pieces
            if block_bytes is not None and desc.block_bytes != block_bytes:
                raise ValueError(f"the description's blocks have {desc.block_bytes} bytes but "
                                 f"the namespace has {block_bytes} bytes_per_block")
        else:
            pieces = list(pieces)
            desc = describe_pieces(pieces, block_bytes, exporter=exporter)
            tensors = list({id(p.tensor): p.tensor for p in pieces}.values())
        events = IpcEventPool(desc.device_index, num_events) if num_events else None
        flags = (LayerFlags(desc.device_index, [p.layer for p in desc.pieces], exporter)
                 if layer_flags else None)
        sid = self._conn.sid()
        self._jobs.completions()  # Start watching before the first job exists.
        r = self._conn.call("register_kv_memory", sid, namespace_id=namespace_id(ns),
                            cuda=desc.to_proto(events.handles if events is not None else (),
                                               flags.to_proto() if flags is not None else None),
                            timeout=timeout)
        reg = CudaRegistration(r.registration_id, namespace_id(ns), desc, events, tensors,
                               flags)

        def keep() -> None:
            with self._lock:
                self._cuda_registrations[reg.registration_id] = reg
        self._conn.keep(sid, "the KV caches", keep)
        return reg

    def unregister_cuda_kv_caches(self, reg: RegistrationArg) -> None:
        """UnregisterKvMemory; the daemon stops using the memory (jobs must be finished)."""
        reg_id = int(reg)
        self._conn.call("unregister_kv_memory", registration_id=reg_id)
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

        Over the fast path (see the module docstring) this returns once the job is handed
        to the daemon's socket: a refusal by the daemon arrives as a failed completion,
        not as an exception. ValueError / TypeError for arguments the client checks (key
        lengths, block ids, the event) and DaemonUnavailable (nothing was sent: the daemon
        is unreachable or the session is reconnecting) are raised at once either way.
        """
        known = self._registration(reg)
        keys = key_list(keys)
        ids = checked_block_ids(keys, block_ids, known.num_blocks if known else None)
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
        sid, tag = self._conn.sid_tag()
        job_id = self._submit_fast(KIND_STORE, sid, tag, ns, reg, keys, ids, event=wait_event)
        if job_id is not None:
            return job_id
        job_id = int(self._conn.call("submit_store", sid, namespace_id=namespace_id(ns),
                                     registration_id=int(reg), wait_event=wait_event,
                                     **self._job_blocks(keys, ids)).job_id)
        return self._jobs.expect(job_id, tag, pb.JobCompletion.KIND_STORE, len(keys))

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
        the waiting streams go on. A load the daemon refused (over the fast path: a failed
        completion, see submit_store) writes no word at all: release(value) then too.

        Returns, raises and reports refusals as submit_store does.
        """
        known = self._registration(reg)
        keys = key_list(keys)
        ids = checked_block_ids(keys, block_ids, known.num_blocks if known else None)
        if layer_flag_value and (known is None or known.layer_flags is None):
            raise ValueError("layer_flag_value needs a registration made with "
                             "register_cuda_kv_caches(..., layer_flags=True)")
        sid, tag = self._conn.sid_tag()
        job_id = self._submit_fast(KIND_LOAD, sid, tag, ns, reg, keys, ids,
                                   event=layer_flag_value, lease_id=lease_id)
        if job_id is not None:
            return job_id
        job_id = int(self._conn.call("submit_load", sid, namespace_id=namespace_id(ns),
                                     registration_id=int(reg), lease_id=lease_id,
                                     layer_flag_value=layer_flag_value,
                                     **self._job_blocks(keys, ids)).job_id)
        return self._jobs.expect(job_id, tag, pb.JobCompletion.KIND_LOAD, len(keys))

    def _submit_fast(self, kind: int, sid: int, tag: int, ns: NamespaceArg,
                     reg: RegistrationArg, keys: List[Any], block_ids: List[int], event: int = 0,
                     lease_id: int = 0) -> Optional[int]:
        """A client job id once the job frame is written to the daemon's fast-path socket
        (its answer is filed by _on_job_answer); None when that path does not apply (see
        the module docstring; keys that are not bytes of one length go there too, to be
        named one by one): then the caller submits through gRPC."""
        packed = packed_keys(keys)
        jobs = self._job_socket() if packed is not None else None
        if jobs is None:
            return None
        version = (VERSION_COMPLETIONS if getattr(self._conn.open_response, "socket_completions",
                                                  False)
                   else VERSION)
        frame = job_frame(kind, sid, namespace_id(ns), int(reg), packed, block_ids,
                          event, lease_id, version)
        job = SentJob(client_job_id(next(self._job_numbers), tag), tag,
                      pb.JobCompletion.KIND_STORE if kind == KIND_STORE
                      else pb.JobCompletion.KIND_LOAD, len(keys), sid)
        tracker = self._jobs.completions()
        tracker.sent(job.job_id, job.kind, job.num_blocks, tag)
        try:
            jobs.send(frame, job)
        except DaemonUnavailable as err:
            tracker.withdraw(job.job_id)
            raise self._conn.failed(err, sid) from None
        return job.job_id

    def _job_socket(self) -> Optional[JobSocket]:
        """The session's JobSocket to the daemon's fast-path socket, or None (use gRPC)."""
        path = self._conn.fast_path_address()
        if path is None:
            return None
        jobs = self._job_sockets.get(path)
        if jobs is None:
            stale: List[JobSocket] = []
            with self._lock:
                jobs = self._job_sockets.get(path)
                if jobs is None:  # The first, or the daemon now names another socket.
                    stale = list(self._job_sockets.values())
                    jobs = JobSocket(path, self._conn.client.timeout, self._on_job_answer,
                                     self._on_jobs_lost, self._on_job_completion)
                    self._job_sockets = {path: jobs}
            for old in stale:
                old.close()
        return jobs if jobs.spoken else None

    def completion_reader(self) -> Optional[Callable[[float], Reading]]:
        """JobSocket.reading of the job socket when job completions come back there (the
        daemon offers socket_completions): a thread waiting for its jobs then reads them
        itself (kvstrata.jobs, CompletionTracker.wait)."""
        if not getattr(self._conn.open_response, "socket_completions", False):
            return None
        for jobs in list(self._job_sockets.values()):
            if jobs.spoken:
                return jobs.reading
        return None

    def _on_job_answer(self, job: SentJob, status: int, daemon_job_id: int,
                       message: str) -> None:
        """A job frame's answer (in the thread reading the JobSocket)."""
        tracker = self._jobs.tracker
        if status == 0:
            if tracker is not None:
                tracker.answered(job.job_id, job.tag, daemon_job_id)
            return
        err = KVStrataError(STATUS_CODES.get(status, grpc.StatusCode.UNKNOWN), message,
                            self._conn.client.endpoint.target)
        if tracker is not None and tracker.refused(job.job_id, job.tag, job.kind,
                                                   job.num_blocks, f"{err.code.name}: {message}"):
            log.warning("kvstrata: %s job %d refused by the daemon, reported as a failed "
                        "completion: %s", _kind_name(job.kind), job.job_id, err)
        self._conn.failed(err, job.session_id)  # Notices a session the daemon no longer knows.

    def _on_job_completion(self, c: SocketCompletion) -> None:
        """A completion frame from the job socket (in the thread reading it)."""
        tracker = self._jobs.tracker
        if tracker is not None:
            tracker.delivered(c.session_id, pb.JobCompletion(
                job_id=c.job_id, kind=c.kind, ok=not c.failed_blocks and not c.error,
                failed_blocks=c.failed_blocks, error=c.error, elapsed_us=c.elapsed_us))

    def _on_jobs_lost(self, jobs: List[SentJob], error: BaseException) -> None:
        """Job frames whose answers a broken connection took with it: failed completions."""
        tracker = self._jobs.tracker
        if isinstance(error, NotSpoken):
            reason = f"{error}; later jobs go through gRPC"
        else:
            reason = f"the fast-path connection broke before the daemon answered: {error}"
        failed = 0
        if tracker is not None:
            failed = sum(tracker.refused(j.job_id, j.tag, j.kind, j.num_blocks, reason)
                         for j in jobs)
        if failed:
            log.warning("kvstrata: %d jobs reported failed: %s", failed, reason)
        # Only these jobs: whether the daemon itself is gone is for the heartbeat, the
        # completion stream and the next call to find out (the next submit connects again).

    def _job_blocks(self, keys: List[Any], block_ids: List[int]) -> dict:
        """The request fields naming a job's blocks (block_ids checked already): parallel
        arrays when the daemon reads them (OpenSessionResponse.packed_transfers), else one
        BlockTransfer per block. TypeError for keys that are not bytes."""
        keys = key_bytes(keys)
        if getattr(self._conn.open_response, "packed_transfers", False):
            return {"keys": keys, "block_ids": block_ids}
        return {"blocks": block_transfers(keys, block_ids, None)}

    def cancel_job(self, job_id: int) -> bool:
        """CancelJob: True when the job was cancelled before it ran (it still completes).

        False for a job of a session lost to a daemon restart (it was reported failed)."""
        job_id = int(job_id)
        sid, tag = self._conn.sid_tag()
        if job_id & JOB_TAG_MASK != tag:
            return False
        if is_client_job_id(job_id):  # Submitted as a job frame: the daemon's id, once answered.
            daemon_job_id = self._jobs.completions().daemon_job_id(job_id,
                                                                   self._conn.client.timeout)
            if daemon_job_id is None:
                return False  # Refused or lost: its failure is reported already.
            return bool(self._conn.call("cancel_job", sid, job_id=daemon_job_id).cancelled)
        return bool(self._conn.call("cancel_job", sid, job_id=job_id & ~JOB_TAG_MASK).cancelled)

    # ------------------------------------------------------------------ reconnect

    def reregister(self, session_id: int,
                   namespace_ids: Dict[int, int]) -> Optional[Callable[[], None]]:
        """Register the kept descriptions on new session session_id (see SessionPart); the
        handles are updated in place once the connection switches. UNAVAILABLE aborts."""
        with self._lock:
            live = [r for r in self._cuda_registrations.values() if not r.unregistered]
        updates = self._reregister_cuda(session_id, live, namespace_ids)
        if live:
            log.info("kvstrata: %d of %d CUDA registrations re-registered on session %d",
                     len(updates), len(live), session_id)
        return lambda: self._apply_cuda_updates(updates)

    def _reregister_cuda(self, sid: int, registrations: List[CudaRegistration],
                         new_ns_ids: Dict[int, int]) -> List[Tuple[CudaRegistration, int, int]]:
        """Register the kept descriptions on new session sid: (registration, new id, new
        namespace id) of each that succeeded. UNAVAILABLE aborts the attempt."""
        timeout = self._conn.client.timeout
        reg_updates: List[Tuple[CudaRegistration, int, int]] = []
        for reg in registrations:
            ns_id = new_ns_ids.get(reg.namespace_id)
            if ns_id is None:
                log.error("kvstrata: CUDA registration %d is not re-registered: its namespace "
                          "%d was not registered through this session (or failed)",
                          reg.registration_id, reg.namespace_id)
                continue
            events = reg.events.handles if reg.events is not None else ()
            # The same layer flags too: without them every layer-wise load of the new
            # session would be refused (each same-step GPU hit a recompute).
            flags = reg.layer_flags.to_proto() if reg.layer_flags is not None else None
            try:
                r = self._conn.client.register_kv_memory(
                    session_id=sid, namespace_id=ns_id,
                    cuda=reg.description.to_proto(events, flags), timeout=timeout)
            except KVStrataError as err:
                if err.code == grpc.StatusCode.UNAVAILABLE:
                    raise
                self._conn.last_error = err
                log.error("kvstrata: re-registering CUDA registration %d failed: %s",
                          reg.registration_id, err)
                continue
            reg_updates.append((reg, r.registration_id, ns_id))
        return reg_updates

    def _apply_cuda_updates(self, reg_updates: List[Tuple[CudaRegistration, int, int]]) -> None:
        """Update the handles in place for the new session (under the connection's lock)."""
        regs: Dict[int, CudaRegistration] = {}
        for reg, new_reg_id, new_ns_id in reg_updates:
            reg.registration_id = int(new_reg_id)
            reg.namespace_id = int(new_ns_id)
            regs[reg.registration_id] = reg
        with self._lock:
            self._cuda_registrations = regs


def _kind_name(kind: int) -> str:
    return "store" if kind == pb.JobCompletion.KIND_STORE else "load"
