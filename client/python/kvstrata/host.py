"""Host mode: results of lookup/store/load and the one-copy block transfers.

Blocks are bytes-like objects (bytes, bytearray, memoryview, array.array, mmap), numpy
arrays, or CPU torch tensors (anything with `.numpy()`); neither numpy nor torch is
imported unless such an object is passed or numpy is needed to return new arrays. Every
block is copied exactly once, between the caller's memory and the shared-memory slot.
"""
from __future__ import annotations

import ctypes
import sys
from dataclasses import dataclass, field
from typing import Any, List, Sequence

from .shm import SharedRegion

# Key bytes accepted as is; everything else a caller passes is rejected early.
_KEY_TYPES = (bytes, bytearray, memoryview)


@dataclass(frozen=True)
class LookupResult:
    """Lookup: leading present blocks, the tier of each (kvstrata.Tier: IntEnum of the
    kvstrata.pb.Tier values), lease."""

    hit_blocks: int
    tiers: List[int] = field(default_factory=list)  # Tier members (ints: unknown tiers)
    lease_id: int = 0                  # 0 when no lease was taken (not asked, or no hit)
    lease_expires_unix_ms: int = 0
    fast: bool = False                 # answered on the daemon's fast-path socket (not gRPC)


@dataclass(frozen=True)
class StoreResult:
    """store(): how many keys were written and committed, already present, or dropped."""

    stored: int = 0
    already_present: int = 0
    dropped: int = 0                   # backpressure or not admitted: skipped, not an error
    # Per key: True = stored or already present (none of the reserved keys when the commit
    # covered fewer than were reserved); and how many keys were reserved.
    ok: List[bool] = field(default_factory=list, compare=False, repr=False)
    reserved: int = field(default=0, compare=False, repr=False)

    def as_dict(self) -> dict:
        return {"stored": self.stored, "already_present": self.already_present,
                "dropped": self.dropped}


class LoadResult(List[bool]):
    """load(): one bool per key (True = bytes copied, False = missing: recompute it).

    A list, so `result == [True, True, False]` and `all(result)` work. `.blocks[i]` is the
    buffer holding key i's bytes (the caller's `out[i]`, or a new numpy uint8 array, or a
    bytearray without numpy) and None for a missing key.
    """

    def __init__(self, found: Sequence[bool], blocks: Sequence[Any]) -> None:
        super().__init__(found)
        self.blocks: List[Any] = list(blocks)

    @property
    def hit_blocks(self) -> int:
        """Number of keys whose bytes were copied."""
        return sum(1 for f in self if f)

    @property
    def leading_hits(self) -> int:
        """Number of leading keys whose bytes were copied."""
        n = 0
        for f in self:
            if not f:
                break
            n += 1
        return n

    def __repr__(self) -> str:
        return f"LoadResult({list(self)!r})"


def key_list(keys: Sequence[Any]) -> List[Any]:
    """The keys as a list (the caller's own list is not copied); TypeError for a single
    bytes object. The keys themselves are key_bytes's check."""
    if isinstance(keys, _KEY_TYPES):
        raise TypeError("keys must be a sequence of bytes, not a single bytes object")
    return keys if type(keys) is list else list(keys)


def key_bytes(keys: Sequence[Any]) -> List[bytes]:
    """Keys as bytes; TypeError for str or other non-bytes (lengths are the daemon's check)."""
    keys = key_list(keys)
    if set(map(type, keys)) <= {bytes}:  # The common case, without a copy per key.
        return keys
    out = []
    for i, k in enumerate(keys):
        if not isinstance(k, _KEY_TYPES):
            raise TypeError(f"keys[{i}] must be bytes, got {type(k).__name__}")
        out.append(bytes(k))
    return out


# ---------------------------------------------------------------------- buffers


def _numpy() -> Any:
    try:
        import numpy
    except ImportError:  # pragma: no cover - numpy is optional
        return None
    return numpy


def _is_ndarray(obj: Any) -> bool:
    np = sys.modules.get("numpy")  # Not imported yet: obj cannot be an ndarray.
    return np is not None and isinstance(obj, np.ndarray)


def _tensor_as_ndarray(obj: Any, what: str) -> Any:
    """A numpy view of a CPU tensor-like object with .numpy() (torch), sharing its memory."""
    t = obj.detach() if callable(getattr(obj, "detach", None)) else obj
    device = getattr(t, "device", None)
    if device is not None and getattr(device, "type", "cpu") != "cpu":
        raise ValueError(f"{what} is on {device}: host mode needs CPU memory")
    try:
        return t.numpy()
    except (TypeError, RuntimeError):
        # dtypes numpy lacks (bfloat16, float8): reinterpret the same memory as bytes.
        if not (callable(getattr(t, "is_contiguous", None)) and t.is_contiguous()):
            raise ValueError(f"{what}: a non-contiguous tensor of a dtype numpy lacks "
                             "cannot be copied without an extra copy; make it contiguous") from None
        import torch  # Present: obj is a torch tensor.

        return t.view(torch.uint8).numpy()


def _check_ndarray(a: Any, nbytes: int, what: str, writable: bool) -> Any:
    """Validate a numpy array; return a flat uint8 view when contiguous, else the array."""
    if a.dtype.hasobject:
        raise ValueError(f"{what}: arrays of Python objects hold no block bytes")
    if a.nbytes != nbytes:
        raise ValueError(f"{what} has {a.nbytes} bytes; the namespace's blocks have {nbytes}")
    if writable and not a.flags.writeable:
        raise ValueError(f"{what} is read-only")
    if a.flags.c_contiguous:
        return a.reshape(-1).view(_numpy().uint8)
    return a  # Strided: copied element-wise through a same-dtype view of the slot.


def _as_block(obj: Any, nbytes: int, what: str, writable: bool) -> Any:
    """A memoryview (format 'B', contiguous) or numpy array describing the block's memory."""
    if _is_ndarray(obj):
        return _check_ndarray(obj, nbytes, what, writable)
    if callable(getattr(obj, "numpy", None)) and not isinstance(obj, (bytes, bytearray, memoryview)):
        return _check_ndarray(_tensor_as_ndarray(obj, what), nbytes, what, writable)
    try:
        mv = memoryview(obj)
    except TypeError:
        raise TypeError(f"{what} must be bytes-like, a numpy array or a CPU tensor, "
                        f"got {type(obj).__name__}") from None
    if mv.nbytes != nbytes:
        raise ValueError(f"{what} has {mv.nbytes} bytes; the namespace's blocks have {nbytes}")
    if writable and mv.readonly:
        raise ValueError(f"{what} is read-only ({type(obj).__name__})")
    if mv.c_contiguous:
        try:
            return mv.cast("B") if (mv.format, mv.ndim) != ("B", 1) else mv
        except TypeError:
            pass  # Non-native formats cannot be cast; numpy understands them.
    np = _numpy()
    if np is None:
        if writable or not mv.contiguous:
            raise ValueError(f"{what}: non-contiguous buffers need numpy")
        return memoryview(mv.tobytes())
    return _check_ndarray(np.asarray(mv), nbytes, what, writable)


def as_source(obj: Any, nbytes: int, index: int) -> Any:
    """Validate blocks[index] for store (exactly nbytes bytes)."""
    return _as_block(obj, nbytes, f"blocks[{index}]", writable=False)


def as_destination(obj: Any, nbytes: int, index: int) -> Any:
    """Validate out[index] for load (writable, exactly nbytes bytes)."""
    return _as_block(obj, nbytes, f"out[{index}]", writable=True)


def new_block(nbytes: int) -> Any:
    """A new uint8 numpy array (bytearray without numpy) of nbytes."""
    np = _numpy()
    return bytearray(nbytes) if np is None else np.empty(nbytes, dtype=np.uint8)


class RegionAddress:
    """The address of a mapped region, valid while this object lives (it holds a buffer
    export, so the region cannot be unmapped under a copy, e.g. by a reconnect)."""

    def __init__(self, region: SharedRegion) -> None:
        self.region = region
        self._anchor: Any = (ctypes.c_ubyte * region.size).from_buffer(region.mmap)
        self.base = ctypes.addressof(self._anchor)

    def release(self) -> None:
        self._anchor = None


class RegionCopier:
    """Copies between blocks and slots of one mapped region (one memcpy per block).

    Holds a numpy uint8 view of the region while it lives; call release() (or use it as a
    context manager) so the region can be unmapped later.
    """

    def __init__(self, region: SharedRegion) -> None:
        self.region = region
        self._whole: Any = None

    def _slot_array(self, offset: int, length: int) -> Any:
        if self._whole is None:
            np = _numpy()
            self._whole = np.frombuffer(self.region.mmap, dtype=np.uint8)
        return self._whole[offset:offset + length]

    def to_slot(self, src: Any, offset: int, length: int) -> None:
        """Copy a prepared block (see as_source) into [offset, offset+length)."""
        self.region.check_range(offset, length)
        if isinstance(src, memoryview):
            self.region.buffer[offset:offset + length] = src
            return
        import numpy as np

        dst = self._slot_array(offset, length)
        if src.dtype != np.uint8 or src.ndim != 1:
            dst = dst.view(src.dtype).reshape(src.shape)
        np.copyto(dst, src, casting="no")

    def from_slot(self, dst: Any, offset: int, length: int) -> None:
        """Copy [offset, offset+length) into a prepared destination (see as_destination)."""
        self.region.check_range(offset, length)
        if isinstance(dst, memoryview):
            dst[:] = self.region.buffer[offset:offset + length]
            return
        import numpy as np

        src = self._slot_array(offset, length)
        if dst.dtype != np.uint8 or dst.ndim != 1:
            src = src.view(dst.dtype).reshape(dst.shape)
        np.copyto(dst, src, casting="no")

    def release(self) -> None:
        self._whole = None

    def __enter__(self) -> "RegionCopier":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
