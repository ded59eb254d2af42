"""batch_exists through kvstratad's lookup fast path (docs/wire-protocol.md, "Lookup fast
path"): binary frames on a persistent Unix-socket connection instead of a gRPC call.

    request  (32 bytes + keys): "KVSL" | u16 version 1 | u16 flags 0 | u64 session_id |
             u32 namespace_id | u32 key_count | u32 key_bytes | u32 lease_ttl_ms | keys
    response (36 bytes + tiers + message): "KVSL" | u32 status | u32 hit_blocks |
             u32 tier_count | u64 lease_id | u64 lease_expires_unix_ms | u32 message_bytes

`hit_blocks()` answers None whenever the fast path cannot answer (no socket offered, keys
of mixed lengths, a connection error, a non-OK status): the caller then asks over gRPC,
which also notices a lost daemon. The connection is dropped on any error and opened again
on the next call (and when the session changes after a reconnect).
"""
from __future__ import annotations

import socket
import struct
import threading
from typing import List, Optional

_REQUEST = struct.Struct("<4sHHQIIII")
_RESPONSE = struct.Struct("<4sIIIQQI")
_MAGIC = b"KVSL"
_MAX_KEYS = 65536


class FastLookup:
    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._sock: Optional[socket.socket] = None
        self._target: Optional[tuple] = None  # (socket path, session id) of _sock

    def hit_blocks(self, path: str, session_id: int, namespace_id: int,
                   keys: List[bytes]) -> Optional[int]:
        if not path or not keys or len(keys) > _MAX_KEYS:
            return None
        width = len(keys[0])
        if not 1 <= width <= 32 or any(len(k) != width for k in keys):
            return None
        frame = _REQUEST.pack(_MAGIC, 1, 0, session_id, namespace_id, len(keys), width, 0) \
            + b"".join(keys)
        with self._lock:
            try:
                sock = self._connect(path, session_id)
                sock.sendall(frame)
                head = _recv_exact(sock, _RESPONSE.size)
                magic, status, hits, tiers, _, _, msg_bytes = _RESPONSE.unpack(head)
                if magic != _MAGIC or tiers > len(keys) or msg_bytes > 1 << 16:
                    raise OSError("malformed lookup fast path answer")
                _recv_exact(sock, tiers + msg_bytes)
            except OSError:
                self._drop()
                return None
        if status != 0 or hits > len(keys):
            return None
        return hits

    def _connect(self, path: str, session_id: int) -> socket.socket:
        if self._sock is None or self._target != (path, session_id):
            self._drop()
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.settimeout(self.timeout_s)
                sock.connect(path)
            except OSError:
                sock.close()
                raise
            self._sock, self._target = sock, (path, session_id)
        return self._sock

    def _drop(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            except OSError:
                pass
        self._sock, self._target = None, None

    def close(self) -> None:
        with self._lock:
            self._drop()


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise OSError("the lookup fast path connection was closed")
        buf += chunk
    return bytes(buf)
