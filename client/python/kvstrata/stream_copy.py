"""Copies of many pieces of bytes between host memory and the shared region, in one call.

copy_pieces([(dst, src, n), ...]) hands the whole list to libkvstrata_copy.so (built from
client/cpp/block_copy.cc by setup.py): each piece is copied with non-temporal stores,
without the GIL. KV pages moved into or out of the cache are not read back by this CPU
soon, and glibc's memmove streams only copies larger than a fraction of the last-level
cache, so pieces of 64 KiB to a few MiB otherwise pay a read-for-ownership of every
destination line. Without the library (no compiler at install time) each piece is one
ctypes.memmove. NATIVE says which is in use.
"""
from __future__ import annotations

import ctypes
import os
from array import array
from typing import Iterable, Optional, Tuple

Piece = Tuple[int, int, int]  # (destination address, source address, bytes)

_LIBRARY = os.path.join(os.path.dirname(__file__), "_generated", "libkvstrata_copy.so")


def _load() -> Optional[ctypes.CDLL]:
    if os.environ.get("KVSTRATA_NATIVE_COPY", "1") == "0" or not os.path.exists(_LIBRARY):
        return None
    try:
        lib = ctypes.CDLL(_LIBRARY)
    except OSError:
        return None
    lib.kvstrata_stream_copy_pieces.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    lib.kvstrata_stream_copy_pieces.restype = None
    return lib


_lib = _load()
NATIVE = _lib is not None


def copy_pieces(pieces: Iterable[Piece]) -> None:
    """Copy every (dst, src, n) piece; the pieces must not overlap each other."""
    if _lib is None:
        for dst, src, n in pieces:
            ctypes.memmove(dst, src, n)
        return
    flat = array("Q")
    for piece in pieces:
        flat.extend(piece)
    count = len(flat) // 3
    if count:
        address, _ = flat.buffer_info()
        _lib.kvstrata_stream_copy_pieces(address, count)
