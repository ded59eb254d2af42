"""Session: an open daemon session kept alive by a background heartbeat thread.

Everything a session creates on the daemon (namespace registrations, leases, reservations,
loads, jobs) ends when it closes or stops heart-beating, so a crashed client never leaks
daemon resources.

Session is the public facade; each concept is one part, in its own module:
- kvstrata.connection: lifecycle (open, session id, lost or not, namespaces, close);
  kvstrata.reconnect: the heartbeat thread and the reconnect after a daemon restart.
- kvstrata.host_io: lookups, leases, and host mode (the engine copies bytes itself through
  the daemon's shared-memory region): store() / load() from buffers, store_pointers() /
  load_pointers() from raw memory, one reserve -> copy -> commit path; the region is
  mapped on first use (shared_region()) and unmapped by close().
- kvstrata.gpu_io: GPU mode (the daemon copies between the engine's CUDA KV cache and its
  tiers): register_cuda_kv_caches() of the KV tensors' pieces, submit_store() /
  submit_load() answering job ids (see kvstrata.kv_pieces and kvstrata.cuda). torch is
  imported only by register_cuda_kv_caches.
- kvstrata.jobs: poll_completions() / take_completions() / wait_jobs() fed by a
  WatchCompletions stream.
- kvstrata.events: poll_events().

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

from .events import Events
from .gpu_io import GpuIO, RegistrationArg
from .host_io import HostIO
from .jobs import SessionJobs
from .reconnect import Reconnect
from .spec import NamespaceArg, RegisteredNamespace

__all__ = ["NamespaceArg", "RegisteredNamespace", "RegistrationArg", "Session"]


class Session(HostIO, GpuIO, SessionJobs, Events, Reconnect):
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

    def _init_parts(self) -> None:
        self._init_host_io()
        self._init_gpu_io()
        self._init_jobs()
        self._init_events()

    def _close_parts(self) -> None:
        self._close_region()
        self._close_jobs()
        self._close_gpu_io()
