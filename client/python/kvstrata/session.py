"""Session: an open daemon session kept alive by a background heartbeat thread.

Everything a session creates on the daemon (namespace registrations, leases, reservations,
loads, jobs) ends when it closes or stops heart-beating, so a crashed client never leaks
daemon resources.

Session is the public facade over parts it holds; each public method is a one-line
delegate to one part. Each part keeps its own state and is given only what it needs:
- `_conn`, a kvstrata.connection.Connection: the session id, every gRPC call (noticing a
  lost daemon or session), namespaces, the daemon's side sockets (shared-memory fd socket,
  fast path), close; its kvstrata.reconnect.Heartbeat thread heart-beats and drives the
  reconnect after a daemon restart. Every other part is given the Connection.
- `_lookups`, kvstrata.lookups.Lookups: lookups and leases (fast path, else gRPC).
- `_host`, kvstrata.host_io.HostIO: host mode (the engine copies bytes itself through the
  daemon's shared-memory region): store() / load() from buffers, store_pointers() /
  load_pointers() from raw memory; the region is mapped on first use (shared_region()).
- `_jobs`, kvstrata.jobs.SessionJobs: the completions of GPU jobs (poll_completions() /
  take_completions() / wait_jobs(), a WatchCompletions stream or the job socket).
- `_gpu`, kvstrata.gpu_io.GpuIO (also given `_jobs`, where it tracks each job): GPU mode
  (the daemon copies between the engine's CUDA KV cache and its tiers):
  register_cuda_kv_caches() of the KV tensors' pieces, submit_store() / submit_load()
  answering job ids (see kvstrata.kv_pieces and kvstrata.cuda). torch is imported only by
  register_cuda_kv_caches.
- `_events`, kvstrata.events.Events: poll_events().
The parts that hold daemon-side state (`_host`, `_jobs`, `_gpu`) are
kvstrata.session_part.SessionPart objects: the Connection tells them, in that order, when
the daemon is lost, the session resumes or is replaced, and when the session closes.

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

from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from google.protobuf.message import Message

from .client import Client, TlsRootCert
from .connection import Connection
from .cuda import CudaRegistration, KvCacheDescription
from .events import Events
from .gpu_io import GpuIO, RegistrationArg
from .host import LoadResult, LookupResult, StoreResult
from .host_io import HostIO, PieceCopy
from .jobs import CompletionTracker, SessionJobs
from .kv_pieces import TensorPiece
from .lookups import Lookups, NamespacesLookup
from .shm import SharedRegion
from .spec import NamespaceArg, RegisteredNamespace
from .tier import TierTable

__all__ = ["NamespaceArg", "RegisteredNamespace", "RegistrationArg", "Session"]


class Session:
    """Opens a session on construction, heart-beats every third of the daemon's deadline.

    Use as a context manager (or call close()). Heartbeat failures never raise: they are
    kept in `.last_error`, and `.alive` turns False while the session is known to be gone.

    Arguments: a kvstrata.Client (or endpoint / token / tls_root_cert / timeout to make
    one, closed with the session), client_name, heartbeat_timeout_ms (0 = the daemon's
    default), hostname and pid (reported to the daemon).
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
                 on_reconnect: Optional[Callable[[Session], Any]] = None,
                 reconnect_backoff: Tuple[float, float] = (0.05, 2.0)) -> None:
        self.on_reconnect = on_reconnect
        self._conn = Connection(client, endpoint=endpoint, client_name=client_name,
                                heartbeat_timeout_ms=heartbeat_timeout_ms, hostname=hostname,
                                pid=pid, token=token, tls_root_cert=tls_root_cert,
                                timeout=timeout, auto_reconnect=auto_reconnect,
                                on_reconnect=self._reconnected,
                                reconnect_backoff=reconnect_backoff)
        self._lookups = Lookups(self._conn)
        self._host = HostIO(self._conn)
        self._jobs = SessionJobs(self._conn)
        self._gpu = GpuIO(self._conn, self._jobs)
        self._events = Events(self._conn)
        for part in (self._host, self._jobs, self._gpu):
            self._conn.add_part(part)
        self._conn.start()

    def _reconnected(self) -> None:
        if self.on_reconnect is not None:
            self.on_reconnect(self)

    # ------------------------------------------------------------------ the connection

    client = property(lambda self: self._conn.client, doc="The session's kvstrata.Client.")
    open_response = property(lambda self: self._conn.open_response,
                             doc="The daemon's OpenSessionResponse of the current session.")
    session_id = property(lambda self: self._conn.session_id,
                          doc="The daemon's id for this session.")
    heartbeat_timeout_ms = property(lambda self: self._conn.heartbeat_timeout_ms,
                                    doc="Heartbeat deadline in force, as answered by the daemon.")
    daemon_instance_id = property(lambda self: self._conn.daemon_instance_id,
                                  doc="Changes on every daemon start.")
    alive = property(lambda self: self._conn.alive, doc="False once closed, or while "
                     "heartbeats show the daemon dropped the session.")
    connected = property(lambda self: self._conn.connected, doc="False from noticing a lost "
                         "daemon / session until the reconnect completed.")
    generation = property(lambda self: self._conn.generation, doc="0 for the first session, "
                          "+1 for every successful reconnect to a new session.")
    closed = property(lambda self: self._conn.closed, doc="True after close().")
    reconnect_attempts = property(lambda self: self._conn.reconnect_attempts,
                                  doc="Reconnect attempts made (all disconnects together).")
    last_error = property(lambda self: self._conn.last_error,
                          doc="The last error a heartbeat, reconnect or cleanup met.")
    auto_reconnect = property(lambda self: self._conn.auto_reconnect,
                              lambda self, on: setattr(self._conn, "auto_reconnect", bool(on)),
                              doc="Survive daemon restarts (see the module docstring).")
    fast_path = property(lambda self: self._conn.fast_path,
                         lambda self, on: setattr(self._conn, "fast_path", on),
                         doc="Lookups and job frames over the daemon's fast-path socket when "
                         "it can (False, or KVSTRATA_FAST_PATH=0: gRPC only).")

    def heartbeat(self) -> Message:
        return self._conn.heartbeat()

    def set_heartbeat_counters(self, provider: Optional[Callable[[], Mapping[str, int]]]) -> None:
        """provider() -> {name: count}, cumulative: sent with every heartbeat, summed by the
        daemon into `kvstrata stats` (kvstrata.heartbeat_counters); None stops it. A provider
        that raises never stops the heartbeats."""
        self._conn.counters.set_provider(provider)

    def register_namespace(self, spec: Any = None, **spec_fields: Any) -> RegisteredNamespace:
        return self._conn.register_namespace(spec, **spec_fields)

    def side_socket(self, advertised: str) -> str:
        return self._conn.side_socket(advertised)

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return repr(self._conn)

    # ------------------------------------------------------------------ lookups

    def lookup(self, ns: NamespaceArg, keys: Sequence[bytes], lease: bool = False,
               lease_ttl_ms: int = 0, promote: bool = True) -> LookupResult:
        return self._lookups.lookup(ns, keys, lease, lease_ttl_ms, promote)

    def lookup_namespaces(self, namespaces: Sequence[NamespaceArg], keys: Sequence[bytes],
                          lease: bool = False, lease_ttl_ms: int = 0,
                          promote: bool = True) -> NamespacesLookup:
        return self._lookups.lookup_namespaces(namespaces, keys, lease, lease_ttl_ms, promote)

    def tier_table(self, refresh: bool = False) -> TierTable:
        """The daemon's tiers by wire value: label, kind, shared (its ListTiers, kept)."""
        return self._lookups.tier_table(refresh)

    def release_lease(self, lease_id: int) -> None:
        self._lookups.release_lease(lease_id)

    def release_leases(self, lease_ids: Sequence[int]) -> int:
        return self._lookups.release_leases(lease_ids)

    # ------------------------------------------------------------------ host mode

    def shared_region(self) -> SharedRegion:
        return self._host.shared_region()

    def store(self, ns: RegisteredNamespace, keys: Sequence[bytes],
              blocks: Sequence[Any]) -> StoreResult:
        return self._host.store(ns, keys, blocks)

    def load(self, ns: RegisteredNamespace, keys: Sequence[bytes],
             out: Optional[Sequence[Any]] = None, lease_id: int = 0) -> LoadResult:
        return self._host.load(ns, keys, out, lease_id)

    def store_pointers(self, ns: RegisteredNamespace, keys: Sequence[bytes],
                       pointers: Sequence[int], piece_sizes: Sequence[int],
                       copy: Optional[PieceCopy] = None) -> StoreResult:
        return self._host.store_pointers(ns, keys, pointers, piece_sizes, copy)

    def load_pointers(self, ns: RegisteredNamespace, keys: Sequence[bytes],
                      pointers: Sequence[int], piece_sizes: Sequence[int],
                      copy: Optional[PieceCopy] = None, lease_id: int = 0) -> List[bool]:
        return self._host.load_pointers(ns, keys, pointers, piece_sizes, copy, lease_id)

    # ------------------------------------------------------------------ GPU mode

    def register_cuda_kv_caches(self, ns: NamespaceArg,
                                pieces: Union[Sequence[TensorPiece], KvCacheDescription], *,
                                num_events: int = 4, exporter: Any = "driver",
                                layer_flags: bool = False,
                                timeout: Optional[float] = None) -> CudaRegistration:
        return self._gpu.register_cuda_kv_caches(ns, pieces, num_events=num_events,
                                                 exporter=exporter, layer_flags=layer_flags,
                                                 timeout=timeout)

    def unregister_cuda_kv_caches(self, reg: RegistrationArg) -> None:
        self._gpu.unregister_cuda_kv_caches(reg)

    def cuda_registration(self, registration_id: int) -> Optional[CudaRegistration]:
        return self._gpu.cuda_registration(registration_id)

    def submit_store(self, ns: NamespaceArg, reg: RegistrationArg, keys: Sequence[bytes],
                     block_ids: Sequence[int], event: Union[None, bool, int] = None) -> int:
        return self._gpu.submit_store(ns, reg, keys, block_ids, event)

    def submit_load(self, ns: NamespaceArg, reg: RegistrationArg, keys: Sequence[bytes],
                    block_ids: Sequence[int], lease_id: int = 0,
                    layer_flag_value: int = 0) -> int:
        return self._gpu.submit_load(ns, reg, keys, block_ids, lease_id, layer_flag_value)

    def cancel_job(self, job_id: int) -> bool:
        return self._gpu.cancel_job(job_id)

    # ------------------------------------------------------------------ job completions

    def completions(self) -> CompletionTracker:
        return self._jobs.completions()

    def poll_completions(self, max_completions: int = 0) -> List[Any]:
        return self._jobs.poll_completions(max_completions)

    def take_completions(self) -> Dict[int, Any]:
        return self._jobs.take_completions()

    def wait_jobs(self, job_ids: Sequence[int], timeout: Optional[float] = None) -> Dict[int, Any]:
        return self._jobs.wait_jobs(job_ids, timeout)

    def wait_job(self, job_id: int, timeout: Optional[float] = None) -> Any:
        return self._jobs.wait_job(job_id, timeout)

    # ------------------------------------------------------------------ events

    def poll_events(self, ns: Optional[NamespaceArg] = None, max_batches: int = 0) -> List[Any]:
        return self._events.poll_events(ns, max_batches)

    events_truncated = property(lambda self: self._events.events_truncated,
                                doc="True after a gap in the events poll_events() returned.")


def _docs_from(part: type, *names: str) -> None:
    """Each delegate shows its part's docstring (help(Session.lookup))."""
    for name in names:
        getattr(Session, name).__doc__ = getattr(part, name).__doc__


_docs_from(Connection, "heartbeat", "register_namespace", "side_socket", "close")
_docs_from(Lookups, "lookup", "lookup_namespaces", "release_lease", "release_leases")
_docs_from(HostIO, "shared_region", "store", "load", "store_pointers", "load_pointers")
_docs_from(GpuIO, "register_cuda_kv_caches", "unregister_cuda_kv_caches", "cuda_registration",
           "submit_store", "submit_load", "cancel_job")
_docs_from(SessionJobs, "completions", "poll_completions", "take_completions", "wait_jobs",
           "wait_job")
_docs_from(Events, "poll_events")
