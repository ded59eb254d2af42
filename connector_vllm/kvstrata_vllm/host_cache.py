"""Host mode (vLLM's CPU engine): the KV cache as rows of block bytes, and the thread that
stores gathered rows through the daemon's shared memory (kvstrata.Session.store).

Units are gathered from the KV cache into rows during wait_for_save (after the forward pass
wrote them) and stored in the background; loads copy slots into rows and scatter them into
the allocated blocks (host_path.py).
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Any, List, Optional, Sequence, Tuple

from kvstrata import TensorPiece

from .worker_book import WorkerBook

log = logging.getLogger("kvstrata_vllm")


class HostCache:
    """Byte views of a CPU KV cache: one [num_blocks, piece_bytes] uint8 view per piece
    (from kv_layouts.kv_cache_pieces), in the pieces' order (layer by layer, K then V), so
    a block's bytes match what the GPU path would store."""

    def __init__(self, pieces: Sequence[TensorPiece]) -> None:
        import torch  # noqa: PLC0415

        self.torch = torch
        self.views = []
        for p in pieces:
            t = p.tensor
            if t.device.type != "cpu":
                raise ValueError(f"{p.what} is on {t.device}: host mode needs CPU tensors")
            storage = t.untyped_storage()
            flat = torch.empty(0, dtype=torch.uint8).set_(storage)
            offset = p.ptr - storage.data_ptr()
            self.views.append(flat.as_strided((p.num_blocks, p.piece_bytes),
                                              (p.block_stride, 1), offset))
        counts = {v.shape[0] for v in self.views}
        if len(counts) != 1:
            raise ValueError(f"the KV cache tensors disagree on the number of blocks: {counts}")
        self.num_blocks = counts.pop()
        self.block_bytes = sum(v.shape[1] for v in self.views)

    def gather(self, block_ids: List[int]) -> Any:
        """[len(block_ids), block_bytes] uint8: a copy of those blocks."""
        idx = self.torch.tensor(block_ids, dtype=self.torch.long)
        return self.torch.cat([v.index_select(0, idx) for v in self.views], dim=1)

    def scatter(self, block_ids: List[int], rows: Any) -> None:
        """Write rows[i] (block_bytes each) into block block_ids[i]."""
        idx = self.torch.tensor(block_ids, dtype=self.torch.long)
        offset = 0
        for v in self.views:
            width = v.shape[1]
            v.index_copy_(0, idx, rows[:, offset:offset + width])
            offset += width


class StoreThread:
    """Stores gathered rows in the background; drops (counted) when the queue is full."""

    def __init__(self, book: WorkerBook) -> None:
        self.book = book
        # (keys, rows, KV cache group) per submitted batch.
        self.queue: "queue.Queue[Optional[Tuple[List[bytes], Any, int]]]" = queue.Queue()
        self.pending_units = 0
        self.pending_bytes = 0
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self.thread = threading.Thread(target=self._run, daemon=True, name="kvstrata-store")
        self.thread.start()

    def fits(self, nbytes: int) -> bool:
        """Whether nbytes more gathered bytes stay within max_pending_store_bytes."""
        with self._lock:
            return self.pending_bytes + nbytes <= self.book.cfg.max_pending_store_bytes

    def submit(self, keys: List[bytes], rows: Any, group: int = 0) -> bool:
        nbytes = int(rows.numel())
        with self._lock:
            if self.pending_bytes + nbytes > self.book.cfg.max_pending_store_bytes:
                return False
            self.pending_units += len(keys)
            self.pending_bytes += nbytes
        self.queue.put((keys, rows, group))
        return True

    def _run(self) -> None:
        w = self.book
        while True:
            item = self.queue.get()
            if item is None:
                return
            keys, rows, group = item
            try:
                s, ns = w.session_and_ns(group)
                result = None
                if s is not None and ns is not None:
                    result = w.link.guard("store", lambda: s.store(ns, keys, list(rows)), None)
                if result is None:
                    w.stats.add("store_dropped_units", len(keys))
                else:
                    w.stats.add("stored_units", result.stored)
                    w.stats.add("stored_bytes", result.stored * rows.shape[1])
                    w.stats.add("store_dropped_units", result.dropped)
                    w.note_stored(keys[:result.stored + result.already_present], group)
            except Exception:  # noqa: BLE001 - never let the thread die
                log.exception("kvstrata_vllm: store failed")
                w.stats.add("store_failed_units", len(keys))
            finally:
                with self._lock:
                    self.pending_units -= len(keys)
                    self.pending_bytes -= int(rows.numel())
                    self._idle.notify_all()

    def drain(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._lock:
            while self.pending_units:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
        return True

    def stop(self, timeout: float) -> None:
        self.drain(timeout)
        self.queue.put(None)
        self.thread.join(timeout=1.0)
