"""Host I/O: the one reserve → copy → commit (store) and acquire → copy
→ release (load) path through the daemon's shared-memory region.

The part of kvstrata.Session for engines that copy bytes themselves. Each store and load
takes its blocks either as buffers (`store` / `load`: bytes-like objects, numpy arrays, CPU
torch tensors; kvstrata.host) or as raw addresses (`store_pointers` / `load_pointers`: each
block is a fixed list of pieces in the caller's memory, e.g. SGLang's host pool pages),
copied with kvstrata.stream_copy or a copy function of the caller's. Both go through the
same calls, checks and error handling below. The region is mapped on first use
(shared_region()), unmapped by close(), and mapped again right after a reconnect to a new
session if it was used (a kvstrata.session_part.SessionPart). Given the session's
kvstrata.connection.Connection (the session id, gRPC calls, the fd socket).
"""
from __future__ import annotations

import logging
import threading
from typing import Any, Callable, List, Optional, Sequence, Tuple

import grpc

from . import pb
from .errors import KVStrataError
from .host import (LoadResult, RegionAddress, RegionCopier, StoreResult, as_destination,
                   as_source, key_bytes, new_block)
from .connection import Connection
from .session_part import SessionPart
from .shm import SharedRegion, SharedRegionError
from .spec import NamespaceArg, RegisteredNamespace, block_bytes
from .stream_copy import Piece, copy_pieces

log = logging.getLogger("kvstrata")

# The slots a copy function gets: (index of the key, its SlotRef), and the mapped region.
Slots = List[Tuple[int, Any]]
CopyFn = Callable[[SharedRegion, Slots], None]
PieceCopy = Callable[[List[Piece]], None]


class HostIO(SessionPart):
    """Host-mode stores and loads of a kvstrata.Session (lookups and leases: Lookups)."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._region: Optional[SharedRegion] = None
        self._region_lock = threading.Lock()
        self._region_used = False  # mapped once: mapped again right after a reconnect

    # ------------------------------------------------------------------ the region

    def shared_region(self) -> SharedRegion:
        """The daemon's shared-memory region for this session, mapped on first use."""
        with self._region_lock:
            if self._conn.closed:
                raise SharedRegionError(grpc.StatusCode.FAILED_PRECONDITION,
                                        "the session is closed")
            if self._region is None or self._region.closed:
                self._region = SharedRegion(self._conn, timeout=self._conn.client.timeout)
                self._region_used = True
            return self._region

    def switched(self, session_id: int, tag: int) -> None:
        self.close()  # The old daemon's region; mapped again by reconnected() if it was used.

    def reconnected(self) -> None:
        if self._region_used:
            try:
                self.shared_region()
            except KVStrataError as err:  # Mapped on first use instead.
                self._conn.last_error = err
                log.warning("kvstrata: mapping the new daemon's region failed: %s", err)

    def close(self) -> None:
        with self._region_lock:
            region, self._region = self._region, None
        if region is not None:
            try:
                region.close()
            except BufferError as err:  # Views still alive: the mapping ends with them.
                log.warning("kvstrata: %s", err)

    # ------------------------------------------------------------------ buffers

    def store(self, ns: RegisteredNamespace, keys: Sequence[bytes],
              blocks: Sequence[Any]) -> StoreResult:
        """Store one block per key: reserve slots, copy each block once into its slot, commit.

        blocks: bytes-like objects, numpy arrays or CPU torch tensors of exactly
        ns.bytes_per_block bytes each (ValueError before any call otherwise). Keys already
        present are skipped; keys the daemon drops (pool pressure, admission) are counted,
        not raised. If copying fails, the reservation is aborted and the error re-raised.
        """
        nbytes = block_bytes(ns)
        keys = key_bytes(keys)
        blocks = list(blocks)
        if len(blocks) != len(keys):
            raise ValueError(f"store: {len(keys)} keys but {len(blocks)} blocks")
        sources = [as_source(b, nbytes, i) for i, b in enumerate(blocks)]

        def copy_in(region: SharedRegion, slots: Slots) -> None:
            with RegionCopier(region) as copier:
                for i, s in slots:
                    copier.to_slot(sources[i], s.offset, s.length)

        return self._reserve_copy_commit(ns, keys, copy_in)

    def load(self, ns: RegisteredNamespace, keys: Sequence[bytes],
             out: Optional[Sequence[Any]] = None, lease_id: int = 0) -> LoadResult:
        """Copy each present key's block out of the shared region, then release the slots.

        out: one writable buffer per key (bytearray, numpy array, CPU torch tensor) of
        ns.bytes_per_block bytes; None = new numpy uint8 arrays. lease_id: a lease from
        lookup(lease=True) covering the keys; it is consumed. Returns a LoadResult: one bool
        per key (False = missing, recompute it); `.blocks` holds the filled buffers.
        """
        nbytes = block_bytes(ns)
        keys = key_bytes(keys)
        if out is not None:
            out = list(out)
            if len(out) != len(keys):
                raise ValueError(f"load: {len(keys)} keys but {len(out)} output buffers")
            targets: List[Any] = [as_destination(o, nbytes, i) for i, o in enumerate(out)]
        blocks: List[Any] = [None] * len(keys)

        def copy_out(region: SharedRegion, slots: Slots) -> None:
            with RegionCopier(region) as copier:
                for i, s in slots:
                    if out is None:
                        blocks[i] = new_block(nbytes)
                        copier.from_slot(as_destination(blocks[i], nbytes, i), s.offset, s.length)
                    else:
                        copier.from_slot(targets[i], s.offset, s.length)
                        blocks[i] = out[i]

        return LoadResult(self._acquire_copy_release(ns, keys, lease_id, copy_out), blocks)

    # ------------------------------------------------------------------ pointers

    def store_pointers(self, ns: RegisteredNamespace, keys: Sequence[bytes],
                       pointers: Sequence[int], piece_sizes: Sequence[int],
                       copy: Optional[PieceCopy] = None) -> StoreResult:
        """store() from raw memory: block i is the pieces pointers[i*n + j] (j < n =
        len(piece_sizes)) of piece_sizes[j] bytes each, laid end to end in the block.
        copy([(dst, src, n), ...]) copies the pieces (default kvstrata.stream_copy).
        `.ok` of the result says, per key, stored or already present."""
        keys = key_bytes(keys)
        sizes, offsets = _pieces_of(ns, len(keys), pointers, piece_sizes)
        run = copy_pieces if copy is None else copy

        def copy_in(region: SharedRegion, slots: Slots) -> None:
            _copy_pointer_pieces(region, slots, pointers, sizes, offsets, run, into_slots=True)

        return self._reserve_copy_commit(ns, keys, copy_in)

    def load_pointers(self, ns: RegisteredNamespace, keys: Sequence[bytes],
                      pointers: Sequence[int], piece_sizes: Sequence[int],
                      copy: Optional[PieceCopy] = None, lease_id: int = 0) -> List[bool]:
        """load() into raw memory laid out as for store_pointers; one bool per key."""
        keys = key_bytes(keys)
        sizes, offsets = _pieces_of(ns, len(keys), pointers, piece_sizes)
        run = copy_pieces if copy is None else copy

        def copy_out(region: SharedRegion, slots: Slots) -> None:
            _copy_pointer_pieces(region, slots, pointers, sizes, offsets, run, into_slots=False)

        return self._acquire_copy_release(ns, keys, lease_id, copy_out)

    # ------------------------------------------------------------------ the one path

    def _reserve_copy_commit(self, ns: RegisteredNamespace, keys: List[bytes],
                             copy_in: CopyFn) -> StoreResult:
        """ReserveStore, copy_in(region, reserved slots), CommitStore (aborted when the copy
        fails, the error re-raised)."""
        if not keys:
            return StoreResult()
        nbytes = ns.bytes_per_block
        sid = self._conn.sid()
        region = self.shared_region()
        r = self._conn.call("reserve_store", sid, namespace_id=ns.namespace_id, keys=keys)
        if len(r.slots) != len(keys):
            if r.reservation_id:
                self._abort_quietly(r.reservation_id, sid)
            raise KVStrataError(grpc.StatusCode.INTERNAL,
                                f"ReserveStore answered {len(r.slots)} slots for {len(keys)} keys",
                                self._conn.client.endpoint.target)
        slot = pb.SlotRef
        ok = [s.state == slot.STATE_ALREADY_PRESENT for s in r.slots]
        reserved = [i for i, s in enumerate(r.slots) if s.state == slot.STATE_RESERVED]
        present = sum(ok)
        dropped = len(keys) - len(reserved) - present
        if not reserved or not r.reservation_id:
            return StoreResult(0, present, dropped, ok=ok, reserved=0)
        try:
            copy_in(region, self._checked_slots(region, r.slots, reserved, nbytes))
        except BaseException:
            self._abort_quietly(r.reservation_id, sid)
            raise
        committed = self._conn.call("commit_store", sid,
                                    reservation_id=r.reservation_id).committed_blocks
        if committed == len(reserved):  # Cut short (session lost meanwhile): claim none.
            for i in reserved:
                ok[i] = True
        return StoreResult(committed, present, dropped + len(reserved) - committed, ok=ok,
                           reserved=len(reserved))

    def _acquire_copy_release(self, ns: RegisteredNamespace, keys: List[bytes], lease_id: int,
                              copy_out: CopyFn) -> List[bool]:
        """AcquireLoad, copy_out(region, ready slots), ReleaseLoad (also when the copy
        fails; then the copy's error wins). One bool per key: copied."""
        if not keys:
            return []
        nbytes = ns.bytes_per_block
        sid = self._conn.sid()
        region = self.shared_region()
        r = self._conn.call("acquire_load", sid, namespace_id=ns.namespace_id, keys=keys,
                            lease_id=lease_id)
        found = [False] * len(keys)
        try:
            if len(r.slots) != len(keys):
                raise KVStrataError(grpc.StatusCode.INTERNAL,
                                    f"AcquireLoad answered {len(r.slots)} slots for {len(keys)} keys",
                                    self._conn.client.endpoint.target)
            ready = [i for i, s in enumerate(r.slots) if s.state == pb.SlotRef.STATE_READY]
            copy_out(region, self._checked_slots(region, r.slots, ready, nbytes))
            for i in ready:
                found[i] = True
        except BaseException:
            if r.load_id:  # The copy failed: release, but let the original error win.
                try:
                    self._conn.call("release_load", sid, load_id=r.load_id)
                except KVStrataError as err:
                    self._conn.last_error = err
            raise
        if r.load_id:
            self._conn.call("release_load", sid, load_id=r.load_id)
        return found

    def _checked_slots(self, region: SharedRegion, slots: Sequence[Any], indices: List[int],
                       nbytes: int) -> Slots:
        """(i, slots[i]) for the indices, each a block's size and inside the region."""
        out = []
        for i in indices:
            s = slots[i]
            if s.length != nbytes:
                raise KVStrataError(
                    grpc.StatusCode.INTERNAL,
                    f"slot {i} is {s.length} bytes; the namespace's blocks have {nbytes}",
                    self._conn.client.endpoint.target)
            region.check_range(s.offset, s.length)
            out.append((i, s))
        return out

    def _abort_quietly(self, reservation_id: int, sid: int) -> None:
        try:
            self._conn.client.commit_store(session_id=sid, reservation_id=reservation_id, abort=True)
        except KVStrataError as err:  # The session's end reclaims the slots anyway.
            self._conn.last_error = err
            log.warning("kvstrata: aborting reservation %d failed: %s", reservation_id, err)


def _pieces_of(ns: Any, num_keys: int, pointers: Sequence[int],
               piece_sizes: Sequence[int]) -> Tuple[List[int], List[int]]:
    """The piece sizes and their offsets inside a block; ValueError before any call when
    they do not add up to the namespace's blocks or the pointers do not match the keys."""
    nbytes = block_bytes(ns)
    sizes = [int(n) for n in piece_sizes]
    if not sizes or any(n <= 0 for n in sizes) or sum(sizes) != nbytes:
        raise ValueError(f"piece sizes {sizes} do not add up to the namespace's blocks of "
                         f"{nbytes} bytes")
    if len(pointers) != num_keys * len(sizes):
        raise ValueError(f"{len(pointers)} pointers for {num_keys} keys of {len(sizes)} "
                         "pieces each")
    offsets, at = [], 0
    for n in sizes:
        offsets.append(at)
        at += n
    return sizes, offsets


def _copy_pointer_pieces(region: SharedRegion, slots: Slots, pointers: Sequence[int],
                         sizes: List[int], offsets: List[int], run: PieceCopy,
                         into_slots: bool) -> None:
    """One copy of each piece of each slot's block, between the caller's memory and the
    slot (into the slots for a store, out of them for a load)."""
    n = len(sizes)
    mapped = RegionAddress(region)  # The region stays mapped while this lives.
    try:
        pieces: List[Piece] = []
        for i, s in slots:
            for j in range(n):
                host, slot = int(pointers[i * n + j]), mapped.base + s.offset + offsets[j]
                pieces.append((slot, host, sizes[j]) if into_slots else (host, slot, sizes[j]))
        run(pieces)
    finally:
        mapped.release()
