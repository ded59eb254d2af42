"""Session: an open daemon session kept alive by a background heartbeat thread.

Everything a session creates on the daemon (namespace registrations, leases, jobs) ends
when it closes or stops heart-beating, so a crashed client never leaks daemon resources.
"""
from __future__ import annotations

import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Optional

import grpc
from google.protobuf.message import Message

from .client import Client, TlsRootCert
from .errors import KVStrataError
from .spec import namespace_spec

log = logging.getLogger("kvstrata")


@dataclass(frozen=True)
class RegisteredNamespace:
    """What RegisterNamespace answered for a spec."""

    namespace_id: int
    fingerprint: str
    bytes_per_block: int


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

    def close(self) -> None:
        """Stop heart-beating and close the session; idempotent, never raises KVStrataError."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
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
