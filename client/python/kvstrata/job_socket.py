"""SubmitStore / SubmitLoad as job frames on the daemon's fast-path socket.

The daemon's `lookup_socket` (OpenSessionResponse) also takes job frames (magic "KVSJ",
docs/wire-protocol.md, "Job frames"): the same checks and the same job as Control.SubmitStore
/ Control.SubmitLoad, without a gRPC round trip (~300 µs of Python gRPC per call on a GPU
host). One persistent Unix stream connection per JobSocket, one frame in flight at a time
(a lock); the completions still arrive on the session's WatchCompletions stream.
"""
from __future__ import annotations

import array
import socket
import struct
import sys
import threading
from typing import Dict, List, Optional

import grpc

from .errors import DaemonUnavailable, KVStrataError

MAGIC = 0x4A53564B  # "KVSJ" read as little-endian
VERSION = 1
KIND_STORE, KIND_LOAD = 1, 2
_REQUEST = struct.Struct("<IHHQIIIIQQ")  # 48 bytes
_RESPONSE = struct.Struct("<IIQI")       # 20 bytes
_CODES: Dict[int, grpc.StatusCode] = {c.value[0]: c for c in grpc.StatusCode}


class NotSpoken(Exception):
    """The socket answered a job frame with something else: the daemon predates job frames."""


class JobSocket:
    """Job frames to one daemon socket. Thread-safe; reconnects lazily after an error."""

    def __init__(self, path: str, timeout: Optional[float] = None) -> None:
        self.path = path
        self.timeout = timeout
        self._sock: Optional[socket.socket] = None
        self._lock = threading.Lock()

    def submit(self, kind: int, session_id: int, namespace_id: int, registration_id: int,
               keys: List[bytes], block_ids: List[int], wait_event: int = 0,
               lease_id: int = 0) -> int:
        """The daemon's job id. keys: all of one length (1..32 bytes). KVStrataError for the
        daemon's answer, DaemonUnavailable when the socket fails, NotSpoken (see above)."""
        ids = array.array("I", block_ids)
        if sys.byteorder != "little":
            ids.byteswap()
        frame = b"".join((_REQUEST.pack(MAGIC, VERSION, kind, session_id, namespace_id,
                                        len(keys), len(keys[0]) if keys else 0, wait_event,
                                        registration_id, lease_id),
                          b"".join(keys), ids.tobytes()))
        with self._lock:
            try:
                sock = self._connected()
                sock.sendall(frame)
                magic, status, job_id, message_bytes = _RESPONSE.unpack(self._recv(sock, 20))
                if magic != MAGIC:
                    self._close()
                    raise NotSpoken(f"{self.path} does not take job frames")
                message = self._recv(sock, message_bytes) if message_bytes else b""
            except OSError as err:
                self._close()
                raise DaemonUnavailable(grpc.StatusCode.UNAVAILABLE,
                                        f"job socket {self.path}: {err}", self.path) from None
        if status:
            raise KVStrataError(_CODES.get(status, grpc.StatusCode.UNKNOWN),
                                message.decode("utf-8", "replace"), self.path)
        return job_id

    def close(self) -> None:
        with self._lock:
            self._close()

    def _connected(self) -> socket.socket:
        if self._sock is None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(self.timeout)
            try:
                sock.connect(self.path)
            except OSError:
                sock.close()
                raise
            self._sock = sock
        return self._sock

    def _close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    @staticmethod
    def _recv(sock: socket.socket, size: int) -> bytes:
        chunks, got = [], 0
        while got < size:
            chunk = sock.recv(size - got)
            if not chunk:
                raise ConnectionResetError("the daemon closed the connection")
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)
