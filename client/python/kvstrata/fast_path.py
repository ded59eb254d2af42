"""Lookup, SubmitStore and SubmitLoad as frames on the daemon's fast-path socket.

The daemon's `lookup_socket` (OpenSessionResponse) answers lookup frames (magic "KVSL"; a
version-2 frame asks several namespaces at once), release frames (magic "KVSR") and job
frames (magic "KVSJ"), docs/wire-protocol.md: the same checks and answers as
Control.Lookup / ReleaseLease / SubmitStore / SubmitLoad, without a gRPC round trip (~300 µs of Python
gRPC per call on a GPU host). One persistent Unix stream connection per FastPathSocket, one
frame in flight at a time (a lock); completions of its (version 1) job frames arrive on the
session's WatchCompletions stream. FastPathSocket.submit waits for the daemon's answer; the
Session sends its jobs through kvstrata.job_socket instead, which does not, and sends them as
version 2 frames where the daemon offers it (OpenSessionResponse.socket_completions): their
completions come back as completion frames (magic "KVSC") on the same connection.
"""
from __future__ import annotations

import array
import socket
import struct
import sys
import threading
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

import grpc

from .errors import DaemonUnavailable, KVStrataError

MAGIC = 0x4A53564B  # "KVSJ" read as little-endian
VERSION = 1
VERSION_COMPLETIONS = 2  # a job frame whose completion comes back on its connection
KIND_STORE, KIND_LOAD = 1, 2
_REQUEST = struct.Struct("<IHHQIIIIQQ")  # 48 bytes
_RESPONSE = struct.Struct("<IIQI")       # 20 bytes
ANSWER_BYTES = _RESPONSE.size
MAX_MESSAGE_BYTES = 4096  # the longest error message a job answer or completion carries
COMPLETION_MAGIC = 0x4353564B  # "KVSC"
_COMPLETION = struct.Struct("<IHHQQQII")  # 40 bytes
COMPLETION_BYTES = _COMPLETION.size
MAX_JOB_BLOCKS = 65536  # the most blocks a job has, so the most a completion names failed
LOOKUP_MAGIC = 0x4C53564B  # "KVSL"
_LOOKUP_REQUEST = struct.Struct("<IHHQIIII")   # 32 bytes
_LOOKUP_RESPONSE = struct.Struct("<IIIIQQI")   # 36 bytes
LOOKUP_VERSION_NAMESPACES = 2  # one chain in several namespaces
LOOKUP_LEASE = 1           # flag: acquire a lease
LOOKUP_SKIP_PROMOTION = 2  # flag, with LOOKUP_LEASE: do not promote the hits below L1
MAX_LOOKUP_NAMESPACES = 64
RELEASE_MAGIC = 0x5253564B  # "KVSR"
_RELEASE_REQUEST = struct.Struct("<IHHQII")    # 24 bytes
MAX_RELEASE_LEASES = 4096
STATUS_CODES: Dict[int, grpc.StatusCode] = {c.value[0]: c for c in grpc.StatusCode}


class NotSpoken(Exception):
    """The socket answered a frame with another magic: the daemon predates job frames."""


class SocketCompletion(NamedTuple):
    """A completion frame: a version-2 job frame's job finished (ids are the daemon's)."""
    session_id: int
    job_id: int
    kind: int              # KIND_STORE / KIND_LOAD
    failed_blocks: List[int]
    error: str
    elapsed_us: int


def _raise_for(status: int, message: bytes, path: str) -> None:
    """KVStrataError for a non-zero status (a gRPC status code number) of a response."""
    if status:
        raise KVStrataError(STATUS_CODES.get(status, grpc.StatusCode.UNKNOWN),
                            message.decode("utf-8", "replace"), path)


def _flags(lease: bool, promote: bool) -> int:
    """A lookup frame's flags (the promotion flag only matters with a lease)."""
    if not lease:
        return 0
    return LOOKUP_LEASE | (0 if promote else LOOKUP_SKIP_PROMOTION)


def completion_tail_bytes(header: bytes) -> int:
    """How many bytes follow a completion frame's 40-byte header (its magic is checked by
    the caller). ValueError when its sizes cannot be trusted."""
    _, _, _, _, _, _, failed, error_bytes = _COMPLETION.unpack(header)
    if failed > MAX_JOB_BLOCKS or error_bytes > MAX_MESSAGE_BYTES:
        raise ValueError(f"a completion frame naming {failed} failed blocks and "
                         f"{error_bytes} error bytes")
    return 4 * failed + error_bytes


def completion(header: bytes, tail: bytes) -> SocketCompletion:
    """The completion a frame's header and its completion_tail_bytes() bytes carry."""
    _, kind, _, session_id, job_id, elapsed_us, failed, _ = _COMPLETION.unpack(header)
    ids = array.array("I", tail[:4 * failed])
    if sys.byteorder != "little":
        ids.byteswap()
    return SocketCompletion(session_id, job_id, kind, ids.tolist(),
                            tail[4 * failed:].decode("utf-8", "replace"), elapsed_us)


class PackedKeys(NamedTuple):
    """A job's keys as a job frame carries them: joined, `count` keys of `size` bytes each."""
    joined: bytes
    count: int
    size: int


def packed_keys(keys: List[Any]) -> Optional[PackedKeys]:
    """The keys joined, when there are some and every one is a bytes-like object of one
    length; None otherwise (the caller then checks them one by one). Two passes over the
    list, the fewest that check this: it runs on the engine's step for every job frame."""
    if not keys:
        return None
    try:
        joined = b"".join(keys)
    except TypeError:
        return None
    size = len(joined) // len(keys)
    if len(joined) != size * len(keys) or set(map(len, keys)) != {size}:
        return None
    return PackedKeys(joined, len(keys), size)


def job_frame(kind: int, session_id: int, namespace_id: int, registration_id: int,
              keys: Union[List[bytes], PackedKeys], block_ids: Sequence[int], event: int = 0,
              lease_id: int = 0, version: int = VERSION) -> bytes:
    """A SubmitStore / SubmitLoad job frame (docs/wire-protocol.md). keys: all of one length
    (1..32 bytes), or packed_keys() of them. event: a store's wait_event or a load's
    layer_flag_value. version: VERSION_COMPLETIONS for a job whose completion comes back on
    the frame's connection."""
    if not isinstance(keys, PackedKeys):
        keys = PackedKeys(b"".join(keys), len(keys), len(keys[0]) if keys else 0)
    ids = array.array("I", block_ids)
    if sys.byteorder != "little":
        ids.byteswap()
    return b"".join((_REQUEST.pack(MAGIC, version, kind, session_id, namespace_id, keys.count,
                                   keys.size, event, registration_id, lease_id),
                     keys.joined, ids.tobytes()))


def job_answer(header: bytes) -> Tuple[int, int, int, int]:
    """(magic, status, job_id, message_bytes) of a job frame's 20-byte answer header."""
    return _RESPONSE.unpack(header)


class FastPathSocket:
    """Lookup and job frames to one daemon socket. Thread-safe; reconnects lazily after an
    error."""

    def __init__(self, path: str, timeout: Optional[float] = None) -> None:
        self.path = path
        self.timeout = timeout
        self._sock: Optional[socket.socket] = None
        self._lock = threading.Lock()

    def submit(self, kind: int, session_id: int, namespace_id: int, registration_id: int,
               keys: List[bytes], block_ids: List[int], event: int = 0,
               lease_id: int = 0) -> int:
        """The daemon's job id. keys: all of one length (1..32 bytes). event: a store's
        wait_event or a load's layer_flag_value. KVStrataError for the daemon's answer,
        DaemonUnavailable when the socket fails, NotSpoken (see above)."""
        frame = job_frame(kind, session_id, namespace_id, registration_id, keys, block_ids,
                          event, lease_id)
        (_, status, job_id, _), message = self._exchange(frame, _RESPONSE, MAGIC,
                                                         lambda h: h[3])
        _raise_for(status, message, self.path)
        return job_id

    def lookup(self, session_id: int, namespace_id: int, keys: List[bytes], lease: bool,
               lease_ttl_ms: int = 0, promote: bool = True) -> Tuple[int, List[int], int, int]:
        """(hit_blocks, tiers, lease_id, lease_expires_unix_ms). keys: all of one length.
        promote=False (with a lease): the hits below L1 are answered, not promoted.
        KVStrataError for the daemon's answer, DaemonUnavailable when the socket fails."""
        frame = b"".join((_LOOKUP_REQUEST.pack(LOOKUP_MAGIC, VERSION, _flags(lease, promote),
                                               session_id, namespace_id, len(keys),
                                               len(keys[0]) if keys else 0, lease_ttl_ms),
                          b"".join(keys)))
        (_, status, hits, tier_count, lease_id, expires, _), tail = self._exchange(
            frame, _LOOKUP_RESPONSE, LOOKUP_MAGIC, lambda h: h[3] + h[6])
        _raise_for(status, tail[tier_count:], self.path)
        return hits, list(tail[:tier_count]), lease_id, expires

    def lookup_namespaces(self, session_id: int, namespace_ids: Sequence[int],
                          keys: List[bytes], lease: bool, lease_ttl_ms: int = 0,
                          promote: bool = True) -> Tuple[int, bytes, List[int], int]:
        """One chain in several namespaces, one round trip (a version-2 lookup frame):
        (hit_blocks every namespace holds, one tier byte per hit -- the slowest any holds
        it in --, one lease id per namespace (0: none), lease_expires_unix_ms). keys: all of
        one length. Errors as lookup()'s; a daemon without version-2 frames answers
        INVALID_ARGUMENT (and closes the connection)."""
        ids = array.array("I", namespace_ids)
        if sys.byteorder != "little":
            ids.byteswap()
        frame = b"".join((_LOOKUP_REQUEST.pack(LOOKUP_MAGIC, LOOKUP_VERSION_NAMESPACES,
                                               _flags(lease, promote), session_id, len(ids),
                                               len(keys), len(keys[0]) if keys else 0,
                                               lease_ttl_ms),
                          ids.tobytes(), b"".join(keys)))
        n = len(ids)
        (_, status, hits, tier_count, _, expires, _), tail = self._exchange(
            frame, _LOOKUP_RESPONSE, LOOKUP_MAGIC,
            lambda h: (0 if h[1] else 8 * n) + h[3] + h[6])
        if status:
            _raise_for(status, tail[tier_count:], self.path)
        leases = array.array("Q", tail[:8 * n])
        if sys.byteorder != "little":
            leases.byteswap()
        return hits, tail[8 * n:8 * n + tier_count], leases.tolist(), expires

    def release(self, session_id: int, lease_ids: Sequence[int]) -> int:
        """End these leases of the session unused, one round trip (a release frame, at most
        MAX_RELEASE_LEASES ids): how many were still live and ended. Errors as lookup()'s."""
        ids = array.array("Q", lease_ids)
        if sys.byteorder != "little":
            ids.byteswap()
        frame = _RELEASE_REQUEST.pack(RELEASE_MAGIC, 1, 0, session_id, len(ids), 0) + \
            ids.tobytes()
        (_, status, released, tier_count, _, _, _), tail = self._exchange(
            frame, _LOOKUP_RESPONSE, LOOKUP_MAGIC, lambda h: h[3] + h[6])
        _raise_for(status, tail[tier_count:], self.path)
        return released

    def close(self) -> None:
        with self._lock:
            self._close()

    def _exchange(self, frame: bytes, response: struct.Struct, magic: int,
                  tail_bytes: Callable[[tuple], int]) -> Tuple[tuple, bytes]:
        """Sends one frame; its response header (checked magic) and the tail_bytes(header)
        bytes after it. DaemonUnavailable when the socket fails, NotSpoken (see above)."""
        with self._lock:
            try:
                sock = self._send(frame)
                header = response.unpack(self._recv(sock, response.size))
                if header[0] != magic:
                    self._close()
                    raise NotSpoken(f"{self.path} answered magic 0x{header[0]:08x}")
                return header, self._recv(sock, tail_bytes(header))
            except OSError as err:
                self._close()
                raise DaemonUnavailable(grpc.StatusCode.UNAVAILABLE,
                                        f"fast-path socket {self.path}: {err}", self.path) from None

    def _send(self, frame: bytes) -> socket.socket:
        """Sends the frame; the connection it went on. A kept connection that fails on
        sending is one to a daemon that went away (a restart): the daemon read nothing of
        the frame, so it is sent once more on a new connection."""
        reused = self._sock is not None
        try:
            sock = self._connected()
            sock.sendall(frame)
            return sock
        except OSError:
            self._close()
            if not reused:
                raise
        sock = self._connected()
        sock.sendall(frame)
        return sock

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
        if size == 0:
            return b""
        chunks, got = [], 0
        while got < size:
            chunk = sock.recv(size - got)
            if not chunk:
                raise ConnectionResetError("the daemon closed the connection")
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)
