"""GPU mode: an engine's CUDA KV cache described for RegisterKvMemory, and its IPC events.

The daemon copies KV blocks itself, between the engine's GPU memory (opened from CUDA IPC
handles) and its L1 pool. What it needs per engine block is a list of *pieces*: for each
piece a CUDA allocation (IPC handle and size), the offset of block 0 in it, the stride
between blocks and the contiguous bytes of one block. In an L1 slot the pieces of a block
are stored back to back in the order given, so they add up to the namespace's
bytes_per_block.

    desc = describe_pieces(pieces, block_bytes=ns.bytes_per_block)

`pieces` are kvstrata.kv_pieces.TensorPiece objects (tensor_pieces, or an engine's layout
in its connector: kvstrata_vllm.kv_layouts, kvstrata_sglang.device_pool); this module
finds the CUDA allocation of each and exports it. Every tensor must be a CUDA tensor of
one device, allocated by PyTorch's native caching allocator (or plain cudaMalloc): legacy
CUDA IPC cannot export expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True),
cudaMallocAsync pools or cuMem (VMM) allocations such as vLLM's sleep-mode pool. Keep the
tensors alive while registered.

IPC handles, the GPU's identity, IPC events and per-layer flags are in kvstrata.cuda_ipc
(re-exported here). torch is imported only by the functions that need it, so this module
imports fine without it.
"""
from __future__ import annotations

import array
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple, Union

from . import pb
from .cuda_ipc import (CUDA_IPC_HANDLE_BYTES, CudaDriverError, Exporter, IpcAllocation,
                       IpcEventPool, LayerFlags, _device_of, _driver, _resolve_exporter,
                       _uuid_of, export_with_driver, export_with_torch, format_gpu_uuid,
                       gpu_uuid, normalize_torch_ipc_handle)
from .kv_pieces import TensorPiece

# Defined in kvstrata.cuda_ipc, importable from here as before.
_REEXPORTED = (CudaDriverError, _driver, export_with_driver, export_with_torch,
               format_gpu_uuid, gpu_uuid, normalize_torch_ipc_handle)


# ---------------------------------------------------------------------- results


@dataclass(frozen=True)
class CudaPiece:
    """One CudaTensor of RegisterKvMemory: a piece of every block in one allocation."""

    ipc_handle: bytes       # cudaIpcMemHandle_t of the allocation, 64 bytes
    base_offset: int        # offset of block 0's piece from the allocation's start
    allocation_bytes: int   # size of the allocation
    block_stride: int       # bytes between consecutive blocks
    piece_bytes: int        # contiguous bytes of one block
    layer: int = 0
    kv_index: int = 0       # 0 = K (or the whole block), 1 = V
    address: int = 0        # device address of block 0's piece here (diagnostics; not sent)

    def to_proto(self) -> Any:
        return pb.CudaTensor(ipc_handle=self.ipc_handle, base_offset=self.base_offset,
                             allocation_bytes=self.allocation_bytes,
                             block_stride=self.block_stride, piece_bytes=self.piece_bytes,
                             layer=self.layer, kv_index=self.kv_index)


@dataclass(frozen=True)
class KvCacheDescription:
    """What describe_pieces found: the pieces of every block, on one GPU."""

    gpu_uuid: str
    device_index: int
    num_blocks: int
    pieces: Tuple[CudaPiece, ...]

    @property
    def block_bytes(self) -> int:
        """Bytes of one block: the sum of the pieces (= the namespace's bytes_per_block)."""
        return sum(p.piece_bytes for p in self.pieces)

    @property
    def allocations(self) -> int:
        """Number of distinct CUDA allocations the pieces live in."""
        return len({p.ipc_handle for p in self.pieces})

    def to_proto(self, ipc_events: Sequence[bytes] = (), layer_flags: Any = None) -> Any:
        """A kvstrata.pb.CudaKvMemory, with the given IPC event handles (and layer flags)."""
        for i, h in enumerate(ipc_events):
            if len(h) != CUDA_IPC_HANDLE_BYTES:
                raise ValueError(f"ipc_events[{i}] is {len(h)} bytes, expected {CUDA_IPC_HANDLE_BYTES}")
        return pb.CudaKvMemory(gpu_uuid=self.gpu_uuid, device_index=self.device_index,
                               num_blocks=self.num_blocks,
                               tensors=[p.to_proto() for p in self.pieces],
                               ipc_events=[bytes(h) for h in ipc_events],
                               layer_flags=layer_flags)


def _merge_adjacent(pieces: List[CudaPiece]) -> List[CudaPiece]:
    """Join consecutive pieces that are adjacent in one allocation (fewer, larger copies)."""
    merged: List[CudaPiece] = []
    for p in pieces:
        last = merged[-1] if merged else None
        if (last is not None and last.ipc_handle == p.ipc_handle
                and last.block_stride == p.block_stride
                and p.base_offset == last.base_offset + last.piece_bytes
                and last.piece_bytes + p.piece_bytes <= p.block_stride):
            merged[-1] = CudaPiece(last.ipc_handle, last.base_offset, last.allocation_bytes,
                                   last.block_stride, last.piece_bytes + p.piece_bytes,
                                   last.layer, last.kv_index, last.address)
        else:
            merged.append(p)
    return merged


def describe_pieces(pieces: Sequence[TensorPiece], block_bytes: Optional[int] = None, *,
                    exporter: Union[str, Exporter] = "driver", gpu_uuid: Optional[str] = None,
                    merge_adjacent: bool = True) -> KvCacheDescription:
    """Describe KV cache pieces as the CudaTensor pieces of RegisterKvMemory (see the module
    docstring); the blocks' byte order is the pieces' order.

    block_bytes: the namespace's bytes_per_block; when given the pieces must add up to it.
    exporter: "driver" (default), "torch" or a callable tensor -> IpcAllocation. gpu_uuid:
    overrides the device's uuid (tests). merge_adjacent: join pieces adjacent in memory
    (e.g. K and V of a [N, 2, ...] view).
    Raises ValueError / TypeError for tensors that do not fit, before anything is sent.
    """
    raw = list(pieces)
    for i, p in enumerate(raw):
        if not isinstance(p, TensorPiece):
            raise TypeError(f"pieces[{i}]: expected a kvstrata.TensorPiece (kvstrata."
                            f"tensor_pieces, or an engine layout of its connector), got "
                            f"{type(p).__name__}")
    if not raw:
        raise ValueError("no pieces: the KV caches hold no tensors")

    devices = {}
    for p in raw:
        devices.setdefault(_device_of(p.tensor, p.what), p.what)
    if len(devices) != 1:
        raise ValueError("all KV cache tensors must be on one device; found "
                         + ", ".join(f"cuda:{d} ({w})" for d, w in sorted(devices.items())))
    device_index = next(iter(devices))
    counts = sorted({p.num_blocks for p in raw})
    if len(counts) != 1:
        raise ValueError(f"the KV cache tensors disagree on the number of blocks: {counts}")
    num_blocks = counts[0]
    if num_blocks >= 1 << 32:
        raise ValueError(f"{num_blocks} blocks do not fit the protocol's uint32 block ids")

    export = _resolve_exporter(exporter)
    allocations: List[IpcAllocation] = []
    out: List[CudaPiece] = []
    for p in raw:
        span = (num_blocks - 1) * p.block_stride + p.piece_bytes
        alloc = next((a for a in allocations if a.contains(p.ptr, span)), None)
        if alloc is None:
            alloc = export(p.tensor)
            if len(alloc.handle) != CUDA_IPC_HANDLE_BYTES:
                raise ValueError(f"{p.what}: IPC handle of {len(alloc.handle)} bytes, expected "
                                 f"{CUDA_IPC_HANDLE_BYTES}")
            if not alloc.contains(p.ptr, span):
                raise ValueError(
                    f"{p.what}: its blocks [{p.ptr:#x}, +{span}) are not inside the exported "
                    f"allocation [{alloc.base:#x}, +{alloc.size}) ({alloc.source})")
            allocations.append(alloc)
        out.append(CudaPiece(alloc.handle, p.ptr - alloc.base, alloc.size, p.block_stride,
                             p.piece_bytes, p.layer, p.kv_index, p.ptr))
    if merge_adjacent:
        out = _merge_adjacent(out)
    total = sum(p.piece_bytes for p in out)
    if block_bytes is not None and total != int(block_bytes):
        raise ValueError(
            f"the KV cache's pieces add up to {total} bytes per block but the namespace has "
            f"{int(block_bytes)} bytes_per_block: check num_layers, num_kv_heads, head_size, "
            f"tokens_per_block, dtype and attention of the namespace spec against the tensors "
            f"({len(raw)} pieces of {sorted({p.piece_bytes for p in raw})} bytes)")
    if gpu_uuid is None:
        gpu_uuid = _uuid_of(device_index)
    return KvCacheDescription(gpu_uuid, device_index, num_blocks, tuple(out))


# ---------------------------------------------------------------------- registrations


class CudaRegistration:
    """A RegisterKvMemory of CUDA KV caches: its id, description and IPC event pool.

    Holds references to the tensors so their memory outlives the registration.
    """

    def __init__(self, registration_id: int, namespace_id: int, description: KvCacheDescription,
                 events: Optional[IpcEventPool], tensors: Sequence[Any],
                 layer_flags: Optional[LayerFlags] = None) -> None:
        self.registration_id = int(registration_id)
        self.namespace_id = int(namespace_id)
        self.description = description
        self.events = events
        self.layer_flags = layer_flags
        self._tensors = list(tensors)
        self.unregistered = False

    @property
    def num_blocks(self) -> int:
        return self.description.num_blocks

    def record_event(self, stream: Any = None) -> int:
        """Record an IPC event on stream (default current); returns the wait_event value."""
        if self.events is None:
            raise ValueError("this registration has no IPC events (num_events=0)")
        return self.events.record(stream)

    def __int__(self) -> int:
        return self.registration_id

    def __index__(self) -> int:
        return self.registration_id

    def __repr__(self) -> str:
        d = self.description
        return (f"kvstrata.CudaRegistration(id={self.registration_id}, {d.gpu_uuid}, "
                f"{d.num_blocks} blocks x {d.block_bytes} bytes, {len(d.pieces)} pieces)")


def checked_block_ids(keys: Sequence[bytes], block_ids: Any,
                      num_blocks: Optional[int]) -> List[int]:
    """block_ids as a list of ints, one per key, each in range; ValueError / TypeError early.

    The common case (a list of ints in range) is checked with two whole-list operations:
    this runs on the engine's step for every submit. Anything with __index__ counts as an
    int (numpy integers, and bools: True is 1)."""
    if hasattr(block_ids, "tolist"):  # numpy arrays, torch tensors
        block_ids = block_ids.tolist()
    ids = block_ids if type(block_ids) is list else list(block_ids)
    if len(ids) != len(keys):
        raise ValueError(f"{len(keys)} keys but {len(ids)} block ids")
    limit = min(num_blocks, 1 << 32) if num_blocks is not None else 1 << 32
    try:  # Types and [0, 2**32) in one pass (TypeError / OverflowError otherwise).
        array.array("I", ids)
        if not ids or max(ids) < limit:
            return ids
    except (TypeError, OverflowError):
        pass  # Named below.
    out = []
    for i, b in enumerate(ids):
        if not isinstance(b, int):
            try:
                b = int(b.__index__())
            except (AttributeError, TypeError):
                raise TypeError(f"block_ids[{i}] must be an int, got {type(b).__name__}") from None
        if b < 0 or b >= limit:
            has = f" (the registration has {num_blocks} blocks)" if num_blocks is not None else ""
            raise ValueError(f"block_ids[{i}] = {b} is out of range{has}")
        out.append(int(b))
    return out


def block_transfers(keys: Sequence[bytes], block_ids: Any, num_blocks: Optional[int]) -> List[Any]:
    """BlockTransfer messages for (key, block id) pairs (daemons without packed_transfers)."""
    ids = checked_block_ids(keys, block_ids, num_blocks)
    return [pb.BlockTransfer(key=k, block_id=b) for k, b in zip(keys, ids)]

