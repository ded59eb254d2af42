"""Copies of page pieces between SGLang's host pool and the daemon's shared-memory slots.

Pieces that continue each other in source and destination are merged first; then one call
to kvstrata.stream_copy copies them all with streaming stores, without the GIL
(ctypes.memmove per piece where the client was installed without its native library). With
copy_threads > 1 a batch of at least PARALLEL_MIN_BYTES is split by bytes into that many
parts, copied at once by a small thread pool and the calling thread.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import List, Optional

from kvstrata.stream_copy import Piece, copy_pieces as _copy

PARALLEL_MIN_BYTES = 8 << 20


def coalesce(pieces: List[Piece]) -> List[Piece]:
    """Merge neighbours that continue each other on both sides (e.g. MLA pages in
    consecutive host pages and consecutive slots) into one larger memmove."""
    out: List[Piece] = []
    for dst, src, n in pieces:
        if out:
            d0, s0, n0 = out[-1]
            if d0 + n0 == dst and s0 + n0 == src:
                out[-1] = (d0, s0, n0 + n)
                continue
        out.append((dst, src, n))
    return out


class PieceCopier:
    def __init__(self, threads: int) -> None:
        self.threads = max(1, int(threads))
        self._pool: Optional[ThreadPoolExecutor] = None
        if self.threads > 1:
            self._pool = ThreadPoolExecutor(self.threads - 1,
                                            thread_name_prefix="kvstrata-copy")

    def run(self, pieces: List[Piece]) -> None:
        pieces = coalesce(pieces)
        total = sum(p[2] for p in pieces)
        if self._pool is None or total < PARALLEL_MIN_BYTES or len(pieces) < 2:
            _copy(pieces)
            return
        parts: List[List[Piece]] = [[]]
        share, acc = total / self.threads, 0
        for p in pieces:  # Consecutive runs of about total/threads bytes each.
            if acc >= share * len(parts) and len(parts) < self.threads:
                parts.append([])
            parts[-1].append(p)
            acc += p[2]
        futures = [self._pool.submit(_copy, part) for part in parts[1:]]
        _copy(parts[0])
        for f in futures:
            f.result()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
