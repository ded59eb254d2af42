"""The daemon's shared-memory region (host mode): receiving its descriptor and mapping it.

Protocol (see control.proto): connect a Unix stream socket to
OpenSessionResponse.shm_fd_socket, send the session id as 8 bytes little-endian; the daemon
answers 8 bytes little-endian region size with the region's memfd attached (SCM_RIGHTS) and
closes the connection. An unknown session gets a size of 0 and no descriptor. The region is
mapped MAP_SHARED read/write; SlotRef offsets are relative to its start.
"""
from __future__ import annotations

import array
import mmap
import os
import socket
import struct
import threading
from typing import Any, Optional, Tuple

import grpc

from .errors import KVStrataError

_U64 = struct.Struct("<Q")
DEFAULT_FD_TIMEOUT_S = 10.0


class SharedRegionError(KVStrataError):
    """The shared-memory region could not be obtained or used.

    `.code` says why: NOT_FOUND (the daemon does not know the session: answered size 0),
    FAILED_PRECONDITION (the daemon offers no region, or the region is closed),
    UNAVAILABLE (the descriptor socket cannot be reached), INTERNAL (a malformed answer),
    OUT_OF_RANGE (a slot outside the mapping).
    """


def _recv_exact_with_fd(sock: socket.socket, endpoint: str) -> Tuple[bytes, Optional[int]]:
    """Read the 8-byte answer and at most one descriptor that comes with it."""
    data = b""
    fd: Optional[int] = None
    fd_size = array.array("i").itemsize
    while len(data) < _U64.size:
        msg, ancdata, flags, _ = sock.recvmsg(_U64.size - len(data), socket.CMSG_SPACE(4 * fd_size))
        for level, kind, payload in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds = array.array("i")
                fds.frombytes(payload[: len(payload) - (len(payload) % fd_size)])
                for extra in fds:
                    if fd is None:
                        fd = extra
                    else:  # Never leak a descriptor we did not ask for.
                        os.close(extra)
        if flags & socket.MSG_CTRUNC:
            if fd is not None:
                os.close(fd)
            raise SharedRegionError(grpc.StatusCode.INTERNAL,
                                    "shared-memory descriptor message was truncated", endpoint)
        if not msg:
            break  # Peer closed.
        data += msg
    return data, fd


def receive_region_fd(fd_socket: str, session_id: int,
                      timeout: float = DEFAULT_FD_TIMEOUT_S) -> Tuple[int, int]:
    """(descriptor, region size) of a session's region, from the daemon's descriptor socket.

    The caller owns the returned descriptor. Raises SharedRegionError (NOT_FOUND when the
    daemon answers size 0, i.e. it does not know the session).
    """
    if not fd_socket:
        raise SharedRegionError(grpc.StatusCode.FAILED_PRECONDITION,
                                "the daemon offers no shared-memory region (empty shm_fd_socket)")
    if not 0 < session_id < (1 << 64):
        raise ValueError(f"session id out of range: {session_id}")
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(fd_socket)
            sock.sendall(_U64.pack(session_id))
            data, fd = _recv_exact_with_fd(sock, fd_socket)
    except socket.timeout as err:
        raise SharedRegionError(grpc.StatusCode.DEADLINE_EXCEEDED,
                                f"no answer on the shared-memory socket within {timeout}s",
                                fd_socket) from err
    except OSError as err:
        raise SharedRegionError(grpc.StatusCode.UNAVAILABLE,
                                f"cannot reach the shared-memory socket: {err}", fd_socket) from err
    if len(data) != _U64.size:
        if fd is not None:
            os.close(fd)
        raise SharedRegionError(grpc.StatusCode.INTERNAL,
                                f"short answer on the shared-memory socket ({len(data)} of 8 bytes)",
                                fd_socket)
    (size,) = _U64.unpack(data)
    if size == 0:
        if fd is not None:
            os.close(fd)
        raise SharedRegionError(grpc.StatusCode.NOT_FOUND,
                                f"the daemon has no shared-memory region for session {session_id} "
                                "(unknown or ended session, or a tenant that may not map one: "
                                "see tenants[].l1_capacity / shared_memory in docs/security.md)",
                                fd_socket)
    if fd is None:
        raise SharedRegionError(grpc.StatusCode.INTERNAL,
                                f"the daemon answered region size {size} without a descriptor",
                                fd_socket)
    return fd, size


class SharedRegion:
    """A session's shared-memory region, mapped MAP_SHARED read/write.

        with kvstrata.SharedRegion(session) as region:      # or SharedRegion.open(path, sid)
            region.buffer[offset:offset + length] = data     # a writable memoryview

    `buffer` is a writable memoryview of the whole region (offsets are SlotRef offsets);
    `view(offset, length)` is a bounds-checked slice of it. close() unmaps the region; it
    raises BufferError while views obtained from it (numpy arrays, slices) are still alive.
    """

    def __init__(self, session: Any = None, *, fd_socket: Optional[str] = None,
                 session_id: Optional[int] = None,
                 timeout: float = DEFAULT_FD_TIMEOUT_S) -> None:
        if session is not None:
            if fd_socket is not None or session_id is not None:
                raise TypeError("SharedRegion: pass a Session, or fd_socket and session_id")
            fd_socket = session.side_socket(session.open_response.shm_fd_socket)
            session_id = session.session_id
        elif fd_socket is None or session_id is None:
            raise TypeError("SharedRegion: pass a Session, or fd_socket and session_id")
        self.fd_socket: str = fd_socket
        self.session_id: int = session_id
        self._lock = threading.Lock()
        fd, size = receive_region_fd(fd_socket, session_id, timeout)
        try:
            actual = os.fstat(fd).st_size
            if actual < size:
                raise SharedRegionError(grpc.StatusCode.INTERNAL,
                                        f"region descriptor holds {actual} bytes, daemon said {size}",
                                        fd_socket)
            self._mmap: Optional[mmap.mmap] = mmap.mmap(
                fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)  # The mapping keeps the memory; the descriptor is no longer needed.
        self.size: int = size
        self._view: Optional[memoryview] = memoryview(self._mmap)

    @classmethod
    def open(cls, fd_socket: str, session_id: int,
             timeout: float = DEFAULT_FD_TIMEOUT_S) -> "SharedRegion":
        """Map the region of `session_id` from the daemon's descriptor socket."""
        return cls(fd_socket=fd_socket, session_id=session_id, timeout=timeout)

    # ------------------------------------------------------------------ access

    @property
    def closed(self) -> bool:
        return self._view is None

    @property
    def buffer(self) -> memoryview:
        """Writable memoryview of the whole region (format 'B')."""
        view = self._view
        if view is None:
            raise SharedRegionError(grpc.StatusCode.FAILED_PRECONDITION,
                                    "the shared-memory region is closed", self.fd_socket)
        return view

    @property
    def mmap(self) -> mmap.mmap:
        """The underlying mmap object (e.g. for numpy.frombuffer)."""
        if self._mmap is None or self._view is None:
            raise SharedRegionError(grpc.StatusCode.FAILED_PRECONDITION,
                                    "the shared-memory region is closed", self.fd_socket)
        return self._mmap

    def check_range(self, offset: int, length: int) -> None:
        """Raise SharedRegionError(OUT_OF_RANGE) unless [offset, offset+length) is inside."""
        if offset < 0 or length < 0 or offset + length > self.size:
            raise SharedRegionError(grpc.StatusCode.OUT_OF_RANGE,
                                    f"slot [{offset}, {offset + length}) is outside the "
                                    f"{self.size}-byte shared-memory region", self.fd_socket)

    def view(self, offset: int, length: int) -> memoryview:
        """Bounds-checked writable memoryview of [offset, offset+length)."""
        self.check_range(offset, length)
        return self.buffer[offset:offset + length]

    # ------------------------------------------------------------------ lifetime

    def close(self) -> None:
        """Unmap the region; idempotent. BufferError while exported views are alive."""
        with self._lock:
            if self._view is None:
                return
            view, mapping = self._view, self._mmap
            try:
                view.release()
            except BufferError as err:
                raise BufferError("SharedRegion.close: views of the region are still alive "
                                  f"({err}); drop them first") from None
            try:
                mapping.close()
            except BufferError as err:
                self._view = memoryview(mapping)  # Still usable; try again later.
                raise BufferError("SharedRegion.close: views of the region are still alive "
                                  f"({err}); drop them first") from None
            self._view = None
            self._mmap = None

    def __enter__(self) -> "SharedRegion":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __len__(self) -> int:
        return self.size

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{self.size} bytes"
        return f"kvstrata.SharedRegion(session={self.session_id}, {state})"
