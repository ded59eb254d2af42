"""GPU mode: describe an engine's CUDA KV cache for RegisterKvMemory, and its IPC events.

The daemon copies KV blocks itself, between the engine's GPU memory (opened from CUDA IPC
handles) and its L1 pool. What it needs per engine block is a list of *pieces*: for each
piece a CUDA allocation (IPC handle and size), the offset of block 0 in it, the stride
between blocks and the contiguous bytes of one block. In an L1 slot the pieces of a block
are stored back to back in the order given, so they add up to the namespace's
bytes_per_block.

    desc = describe_kv_caches(kv_caches, "vllm", block_bytes=ns.bytes_per_block)

`kv_caches` and `layout`:

- "vllm" (aliases "vllm_nhd", "vllm_hnd", "vllm_flashinfer"): vLLM's per-layer caches, a
  dict layer_name -> tensor (ordered by the layer number in the name) or a list in layer
  order. Per tensor:
    [2, num_blocks, ...] (FlashAttention and most backends; NHD [2, N, block_size,
      kv_heads, head_size] or HND [2, N, kv_heads, block_size, head_size]): K and V are two
      pieces per layer (kv_index 0 and 1);
    [num_blocks, 2, ...] (FlashInfer): K and V of a block are adjacent, one piece per layer;
    [num_blocks, ...] (MLA, 3-D): one piece per layer.
  Permuted views (vLLM's stride order for HND, e.g. logical [2, N, block_size, heads,
  head_size] over physical [2, N, heads, block_size, head_size]) are fine: a piece only has
  to be dense within a block; its bytes are copied in memory order. When K/V and block
  dims are both of size 2, pass block_dim (1 for [2, N, ...], 0 for [N, 2, ...]).
- "vllm_cross_layer" (alias "cross_layer"): one tensor holding every layer, blocks
  outermost in memory (e.g. [num_blocks, num_layers, 2, block_size, kv_heads, head_size]):
  one piece per block. The block dim is the dim with the largest stride unless block_dim
  says otherwise.
- "sglang": SGLang's device pool, token-major per layer: (k_buffers, v_buffers) — or a
  dict {"k": [...], "v": [...]} — with k_buffers[l] of shape [num_tokens, kv_heads,
  head_dim] (MHATokenToKVPool.k_buffer / v_buffer), or a single list of per-layer
  [num_tokens, 1, kv_lora_rank + rope_dim] tensors (MLATokenToKVPool.kv_buffer).
  tokens_per_block (SGLang's page_size) is required: block b is tokens [b*page_size,
  (b+1)*page_size) and SGLang's block ids are its page indices (token index // page_size;
  page 0 holds SGLang's padding slot). Pieces are K of every layer, then V of every layer
  (kv_index 0 / 1) — the per-page byte order of SGLang's page_first_direct host layout
  ([2, pages, layers, page_size, heads, head_dim]).

Every tensor must be a CUDA tensor of one device, allocated by PyTorch's native caching
allocator (or plain cudaMalloc): legacy CUDA IPC cannot export expandable segments
(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True), cudaMallocAsync pools or cuMem (VMM)
allocations such as vLLM's sleep-mode pool. Keep the tensors alive while registered.

IPC handles: by default ("driver") each allocation is found and exported through the CUDA
driver (libcuda.so.1 through ctypes: cuMemGetAddressRange gives the cudaMalloc'ed segment
base and size, cuIpcGetMemHandle its handle) — no private torch API and no side effects.
exporter="torch" uses `tensor.untyped_storage()._share_cuda_()` instead (handle bytes of the
caching-allocator segment, raw 64 bytes in older torch, 2-byte version/type prefix + 64 in
torch >= 2.5), still with cuMemGetAddressRange for the size. Note that _share_cuda_ also
sets up torch's producer-side IPC reference counting, which no torch consumer will ever
release here: the storage's memory then stays in torch's "limbo" after the tensor is freed
(harmless for a KV cache that lives as long as the engine, a leak for short-lived tensors).

torch is imported only by the functions that need it (gpu_uuid, the default exporters,
IpcEventPool), so this module imports fine without it.
"""
from __future__ import annotations

import ctypes
import re
import threading
import uuid as _uuid
from dataclasses import dataclass
from typing import Any, Callable, List, Mapping, Optional, Sequence, Tuple, Union

from . import pb

CUDA_IPC_HANDLE_BYTES = 64
_SHAREABLE_CUDA_MALLOC = ord("c")
_SHAREABLE_EXPANDABLE_SEGMENT = ord("e")

_LAYOUT_ALIASES = {
    "vllm": "vllm", "vllm_nhd": "vllm", "vllm_hnd": "vllm", "vllm_flashinfer": "vllm",
    "vllm_cross_layer": "cross_layer", "cross_layer": "cross_layer",
    "sglang": "sglang", "sglang_mha": "sglang", "sglang_mla": "sglang",
}
LAYOUTS = tuple(sorted(_LAYOUT_ALIASES))


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
    """What describe_kv_caches found: the pieces of every block, on one GPU."""

    gpu_uuid: str
    device_index: int
    num_blocks: int
    pieces: Tuple[CudaPiece, ...]
    layout: str

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


@dataclass(frozen=True)
class IpcAllocation:
    """A CUDA allocation as exported: IPC handle, device address of its start, size."""

    handle: bytes
    base: int
    size: int
    source: str = ""   # how it was found (diagnostics)

    def contains(self, ptr: int, nbytes: int) -> bool:
        return self.base <= ptr and ptr + nbytes <= self.base + self.size


Exporter = Callable[[Any], IpcAllocation]


# ---------------------------------------------------------------------- geometry


@dataclass(frozen=True)
class _View:
    """Strided view of device memory: address of element 0, shape, strides (elements)."""

    ptr: int
    shape: Tuple[int, ...]
    strides: Tuple[int, ...]
    itemsize: int
    what: str

    def select(self, dim: int, index: int, what: str) -> "_View":
        return _View(self.ptr + index * self.strides[dim] * self.itemsize,
                     self.shape[:dim] + self.shape[dim + 1:],
                     self.strides[:dim] + self.strides[dim + 1:], self.itemsize, what)

    def extent_bytes(self) -> int:
        """Bytes from ptr to the end of the last element."""
        if any(s == 0 for s in self.shape):
            return 0
        return (sum((n - 1) * st for n, st in zip(self.shape, self.strides)) + 1) * self.itemsize


@dataclass(frozen=True)
class _RawPiece:
    ptr: int
    num_blocks: int
    block_stride: int
    piece_bytes: int
    layer: int
    kv_index: int
    what: str


def _view_of(t: Any, what: str) -> _View:
    try:
        shape = tuple(int(s) for s in t.shape)
        strides = tuple(int(s) for s in t.stride())
        itemsize = int(t.element_size())
        ptr = int(t.data_ptr())
    except (AttributeError, TypeError) as err:
        raise TypeError(f"{what}: expected a torch.Tensor (shape, stride(), element_size(), "
                        f"data_ptr()), got {type(t).__name__}") from err
    if len(shape) != len(strides):
        raise ValueError(f"{what}: shape {shape} and strides {strides} differ in length")
    if not shape:
        raise ValueError(f"{what}: a 0-d tensor holds no blocks")
    if any(s == 0 for s in shape):
        raise ValueError(f"{what}: empty tensor (shape {list(shape)})")
    if any(st < 0 for st in strides):
        raise ValueError(f"{what}: negative strides are not supported")
    return _View(ptr, shape, strides, itemsize, what)


def _block_piece(view: _View, block_dim: int, layer: int, kv_index: int) -> _RawPiece:
    """The piece of `view` with blocks along block_dim; every other dim must be dense."""
    if not -len(view.shape) <= block_dim < len(view.shape):
        raise ValueError(f"{view.what}: block_dim {block_dim} out of range for shape "
                         f"{list(view.shape)}")
    block_dim %= len(view.shape)
    inner = sorted(((st, n) for d, (n, st) in enumerate(zip(view.shape, view.strides))
                    if d != block_dim and n != 1))
    expected = 1
    for st, n in inner:
        if st != expected:
            raise ValueError(
                f"{view.what}: the bytes of one block are not contiguous (shape "
                f"{list(view.shape)}, strides {list(view.strides)} elements, blocks along dim "
                f"{block_dim}); each block's elements must form one dense range")
        expected *= n
    piece_bytes = expected * view.itemsize
    num_blocks = view.shape[block_dim]
    block_stride = view.strides[block_dim] * view.itemsize
    if num_blocks == 1:
        block_stride = max(block_stride, piece_bytes)
    elif block_stride < piece_bytes:
        raise ValueError(f"{view.what}: blocks overlap (stride {block_stride} bytes between "
                         f"blocks of {piece_bytes} bytes)")
    return _RawPiece(view.ptr, num_blocks, block_stride, piece_bytes, layer, kv_index, view.what)


def _natural_key(name: str) -> Tuple:
    return tuple(int(tok) if tok.isdigit() else tok for tok in re.split(r"(\d+)", name))


def _is_tensor_like(obj: Any) -> bool:
    return callable(getattr(obj, "data_ptr", None)) and hasattr(obj, "shape")


def layer_names(kv_caches: Mapping) -> List[Any]:
    """The keys of a dict of per-layer caches in layer order: describe_kv_caches gives the
    caches of the i-th of them `layer` i (ordered by the numbers in the keys)."""
    return sorted(kv_caches, key=lambda k: _natural_key(str(k)))


def _tensor_list(kv_caches: Any, what: str) -> List[Tuple[str, Any]]:
    """(name, tensor) pairs: a dict ordered by the layer numbers in its keys, or a list."""
    if isinstance(kv_caches, Mapping):
        return [(f"{what}[{n!r}]", kv_caches[n]) for n in layer_names(kv_caches)]
    if _is_tensor_like(kv_caches):
        return [(what, kv_caches)]
    if isinstance(kv_caches, (list, tuple)):
        return [(f"{what}[{i}]", t) for i, t in enumerate(kv_caches)]
    raise TypeError(f"{what}: expected a dict of layer name -> tensor, a list of tensors or a "
                    f"tensor, got {type(kv_caches).__name__}")


def _vllm_pieces(kv_caches: Any, block_dim: Optional[int]) -> List[Tuple[Any, _RawPiece]]:
    if _is_tensor_like(kv_caches):
        raise TypeError("layout 'vllm' takes per-layer caches (a dict or list of tensors); "
                        "use layout='vllm_cross_layer' for one cross-layer tensor")
    out = []
    for layer, (what, t) in enumerate(_tensor_list(kv_caches, "kv_caches")):
        v = _view_of(t, what)
        nd = len(v.shape)
        if block_dim is not None:
            b = block_dim % nd
            other = 1 - b if b in (0, 1) else None
            kv = other if (other is not None and nd >= 4 and v.shape[other] == 2) else None
        elif nd >= 4 and v.shape[0] == 2:
            kv, b = 0, 1           # [2, N, ...]: K/V split first
        elif nd >= 4 and v.shape[1] == 2:
            kv, b = 1, 0           # [N, 2, ...]: FlashInfer
        else:
            kv, b = None, 0        # [N, ...]: MLA and other single-component caches
        if kv is not None and v.strides[kv] > v.strides[b]:
            b_sub = b - 1 if kv < b else b
            for k in (0, 1):
                sub = v.select(kv, k, f"{what}[{'K' if k == 0 else 'V'}]")
                out.append((t, _block_piece(sub, b_sub, layer, k)))
        else:
            out.append((t, _block_piece(v, b, layer, 0)))
    return out


def _cross_layer_pieces(kv_caches: Any, block_dim: Optional[int]) -> List[Tuple[Any, _RawPiece]]:
    tensors = _tensor_list(kv_caches, "kv_caches")
    if len(tensors) != 1:
        raise ValueError(f"layout 'vllm_cross_layer' takes one tensor, got {len(tensors)}")
    what, t = tensors[0]
    v = _view_of(t, what)
    if block_dim is None:
        # Blocks are outermost in memory: the dim with the largest stride (first on ties).
        candidates = [d for d, n in enumerate(v.shape) if n != 1] or [0]
        block_dim = max(candidates, key=lambda d: (v.strides[d], -d))
    return [(t, _block_piece(v, block_dim, 0, 0))]


def _sglang_pieces(kv_caches: Any, tokens_per_block: Optional[int]) -> List[Tuple[Any, _RawPiece]]:
    if not tokens_per_block or tokens_per_block < 1:
        raise ValueError("layout 'sglang' needs tokens_per_block (SGLang's page_size)")
    if isinstance(kv_caches, Mapping):
        keys = {str(k).lower(): k for k in kv_caches}
        k_key = keys.get("k") or keys.get("k_buffer") or keys.get("k_buffers")
        v_key = keys.get("v") or keys.get("v_buffer") or keys.get("v_buffers")
        if k_key is None or v_key is None:
            raise ValueError("layout 'sglang' takes {'k': [...], 'v': [...]} (or "
                             f"(k_buffers, v_buffers)), got keys {sorted(keys)}")
        groups = [("k_buffer", kv_caches[k_key]), ("v_buffer", kv_caches[v_key])]
    elif (isinstance(kv_caches, (list, tuple)) and len(kv_caches) == 2
          and all(isinstance(g, (list, tuple)) for g in kv_caches)):
        groups = [("k_buffer", kv_caches[0]), ("v_buffer", kv_caches[1])]
    elif isinstance(kv_caches, (list, tuple)) and all(_is_tensor_like(t) for t in kv_caches):
        groups = [("kv_buffer", kv_caches)]  # MLA: one latent buffer per layer
    else:
        raise TypeError("layout 'sglang' takes (k_buffers, v_buffers), {'k': ..., 'v': ...} "
                        "or one list of per-layer buffers (MLA)")
    if len(groups) == 2 and len(groups[0][1]) != len(groups[1][1]):
        raise ValueError(f"sglang: {len(groups[0][1])} K buffers but {len(groups[1][1])} V buffers")
    page = int(tokens_per_block)
    out = []
    for kv_index, (name, buffers) in enumerate(groups):
        for layer, t in enumerate(buffers):
            v = _view_of(t, f"{name}[{layer}]")
            rows = v.shape[0]
            if rows % page:
                raise ValueError(f"{v.what}: {rows} token rows is not a multiple of "
                                 f"tokens_per_block={page}")
            paged = _View(v.ptr, (rows // page, page) + v.shape[1:],
                          (v.strides[0] * page,) + v.strides, v.itemsize, v.what)
            out.append((t, _block_piece(paged, 0, layer, kv_index)))
    return out


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


def _device_of(t: Any, what: str) -> int:
    device = getattr(t, "device", None)
    kind = getattr(device, "type", None)
    if kind != "cuda":
        raise ValueError(f"{what} is on {device}: GPU mode needs CUDA tensors")
    index = getattr(device, "index", None)
    return 0 if index is None else int(index)


def describe_kv_caches(kv_caches: Any, layout: str, block_bytes: Optional[int] = None, *,
                       tokens_per_block: Optional[int] = None, block_dim: Optional[int] = None,
                       exporter: Union[str, Exporter] = "driver", gpu_uuid: Optional[str] = None,
                       merge_adjacent: bool = True) -> KvCacheDescription:
    """Describe an engine's KV cache tensors as CudaTensor pieces (see the module docstring).

    block_bytes: the namespace's bytes_per_block; when given the pieces must add up to it.
    tokens_per_block: SGLang's page size (layout "sglang" only). block_dim: overrides the
    block dim where the shape is ambiguous. exporter: "driver" (default), "torch" or a
    callable tensor -> IpcAllocation. gpu_uuid: overrides the device's uuid (tests).
    merge_adjacent: join pieces adjacent in memory (e.g. K and V of a [N, 2, ...] view).
    Raises ValueError / TypeError for tensors that do not fit, before anything is sent.
    """
    kind = _LAYOUT_ALIASES.get(str(layout).lower())
    if kind is None:
        raise ValueError(f"unknown layout {layout!r}; expected one of: {', '.join(LAYOUTS)}")
    if kind == "vllm":
        raw = _vllm_pieces(kv_caches, block_dim)
    elif kind == "cross_layer":
        raw = _cross_layer_pieces(kv_caches, block_dim)
    else:
        raw = _sglang_pieces(kv_caches, tokens_per_block)
    if not raw:
        raise ValueError("kv_caches holds no tensors")

    devices = {}
    for t, p in raw:
        devices.setdefault(_device_of(t, p.what), p.what)
    if len(devices) != 1:
        raise ValueError("all KV cache tensors must be on one device; found "
                         + ", ".join(f"cuda:{d} ({w})" for d, w in sorted(devices.items())))
    device_index = next(iter(devices))
    counts = sorted({p.num_blocks for _, p in raw})
    if len(counts) != 1:
        raise ValueError(f"the KV cache tensors disagree on the number of blocks: {counts}")
    num_blocks = counts[0]
    if num_blocks >= 1 << 32:
        raise ValueError(f"{num_blocks} blocks do not fit the protocol's uint32 block ids")

    export = _resolve_exporter(exporter)
    allocations: List[IpcAllocation] = []
    pieces: List[CudaPiece] = []
    for t, p in raw:
        span = (num_blocks - 1) * p.block_stride + p.piece_bytes
        alloc = next((a for a in allocations if a.contains(p.ptr, span)), None)
        if alloc is None:
            alloc = export(t)
            if len(alloc.handle) != CUDA_IPC_HANDLE_BYTES:
                raise ValueError(f"{p.what}: IPC handle of {len(alloc.handle)} bytes, expected "
                                 f"{CUDA_IPC_HANDLE_BYTES}")
            if not alloc.contains(p.ptr, span):
                raise ValueError(
                    f"{p.what}: its blocks [{p.ptr:#x}, +{span}) are not inside the exported "
                    f"allocation [{alloc.base:#x}, +{alloc.size}) ({alloc.source})")
            allocations.append(alloc)
        pieces.append(CudaPiece(alloc.handle, p.ptr - alloc.base, alloc.size, p.block_stride,
                                p.piece_bytes, p.layer, p.kv_index, p.ptr))
    if merge_adjacent:
        pieces = _merge_adjacent(pieces)
    total = sum(p.piece_bytes for p in pieces)
    if block_bytes is not None and total != int(block_bytes):
        raise ValueError(
            f"the KV cache's pieces add up to {total} bytes per block but the namespace has "
            f"{int(block_bytes)} bytes_per_block: check num_layers, num_kv_heads, head_size, "
            f"tokens_per_block, dtype and attention of the namespace spec against the tensors "
            f"({len(raw)} pieces of {sorted({p.piece_bytes for _, p in raw})} bytes)")
    if gpu_uuid is None:
        gpu_uuid = _uuid_of(device_index)
    return KvCacheDescription(gpu_uuid, device_index, num_blocks, tuple(pieces), layout)


# ---------------------------------------------------------------------- GPU identity


def format_gpu_uuid(raw: bytes) -> str:
    """16 uuid bytes -> "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (lowercase, as the daemon)."""
    raw = bytes(raw)
    if len(raw) != 16:
        raise ValueError(f"a GPU uuid has 16 bytes, got {len(raw)}")
    return "GPU-" + str(_uuid.UUID(bytes=raw))


def gpu_uuid(device_index: int) -> str:
    """The "GPU-..." uuid of a CUDA device of this process (torch's device index)."""
    import torch

    props = torch.cuda.get_device_properties(device_index)
    u = getattr(props, "uuid", None)
    raw = getattr(u, "bytes", None)
    if raw is not None and len(raw) == 16:
        return format_gpu_uuid(bytes(bytearray(raw)))
    if u is not None:
        text = str(u).strip().lower()
        for prefix in ("gpu-", "mig-"):
            if text.startswith(prefix):
                text = text[len(prefix):]
        try:
            return "GPU-" + str(_uuid.UUID(text))
        except ValueError:
            pass
    return format_gpu_uuid(_driver().device_uuid(device_index))


def _uuid_of(device_index: int) -> str:
    return gpu_uuid(device_index)


# ---------------------------------------------------------------------- exporters


class CudaDriverError(RuntimeError):
    """A CUDA driver call (through libcuda.so.1) failed."""


class _Driver:
    """The few CUDA driver calls needed here, through ctypes on libcuda.so.1."""

    def __init__(self) -> None:
        try:
            self.lib = ctypes.CDLL("libcuda.so.1")
        except OSError as err:
            raise CudaDriverError(f"cannot load libcuda.so.1 (no NVIDIA driver?): {err}") from err
        self._lock = threading.Lock()
        self._wait_value64: Any = None
        self._check("cuInit", self.lib.cuInit(ctypes.c_uint(0)))

    def _error_name(self, rc: int) -> str:
        name = ctypes.c_char_p()
        try:
            if self.lib.cuGetErrorName(ctypes.c_int(rc), ctypes.byref(name)) == 0 and name.value:
                return name.value.decode()
        except AttributeError:
            pass
        return f"CUresult {rc}"

    def _check(self, call: str, rc: int) -> None:
        if rc != 0:
            raise CudaDriverError(f"{call} failed: {self._error_name(rc)}")

    def _with_context(self, device_index: int, fn: Callable[[], Any]) -> Any:
        """Run fn with the device's primary context current (the one torch uses)."""
        lib = self.lib
        dev = ctypes.c_int()
        self._check("cuDeviceGet", lib.cuDeviceGet(ctypes.byref(dev), ctypes.c_int(device_index)))
        ctx = ctypes.c_void_p()
        self._check("cuDevicePrimaryCtxRetain",
                    lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))
        try:
            self._check("cuCtxPushCurrent", lib.cuCtxPushCurrent_v2(ctx))
            try:
                return fn()
            finally:
                lib.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))
        finally:
            lib.cuDevicePrimaryCtxRelease_v2(dev)

    def address_range(self, device_index: int, ptr: int) -> Tuple[int, int]:
        """(base, size) of the allocation holding device address ptr."""
        def run() -> Tuple[int, int]:
            base, size = ctypes.c_uint64(), ctypes.c_size_t()
            self._check("cuMemGetAddressRange",
                        self.lib.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size),
                                                         ctypes.c_uint64(ptr)))
            return int(base.value), int(size.value)
        with self._lock:
            return self._with_context(device_index, run)

    def ipc_handle(self, device_index: int, base: int) -> bytes:
        """cuIpcGetMemHandle of the allocation starting at base."""
        def run() -> bytes:
            handle = (ctypes.c_char * CUDA_IPC_HANDLE_BYTES)()
            rc = self.lib.cuIpcGetMemHandle(handle, ctypes.c_uint64(base))
            if rc != 0:
                raise CudaDriverError(
                    f"cuIpcGetMemHandle failed: {self._error_name(rc)} (legacy CUDA IPC needs "
                    "cudaMalloc'ed memory: no expandable segments, cudaMallocAsync or VMM pools)")
            return bytes(handle.raw)
        with self._lock:
            return self._with_context(device_index, run)

    def stream_wait_value64(self, stream: int, address: int, value: int) -> None:
        """cuStreamWaitValue64(stream, address, value, GEQ): the stream's later work waits
        (on the GPU) until the 8-byte word at `address` is >= value. The calling thread's
        current context must own the stream (as torch's streams on torch's thread)."""
        fn = self._wait_value64
        if fn is None:
            fn = getattr(self.lib, "cuStreamWaitValue64_v2", None) or self.lib.cuStreamWaitValue64
            fn.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint]
            fn.restype = ctypes.c_int
            self._wait_value64 = fn
        self._check("cuStreamWaitValue64", fn(stream, address, value, 0))  # 0 = GEQ

    def device_uuid(self, device_index: int) -> bytes:
        dev = ctypes.c_int()
        self._check("cuDeviceGet", self.lib.cuDeviceGet(ctypes.byref(dev), ctypes.c_int(device_index)))
        raw = (ctypes.c_char * 16)()
        fn = getattr(self.lib, "cuDeviceGetUuid_v2", None) or self.lib.cuDeviceGetUuid
        self._check("cuDeviceGetUuid", fn(raw, dev))
        return bytes(raw.raw)


_driver_instance: Optional[_Driver] = None
_driver_lock = threading.Lock()


def _driver() -> _Driver:
    global _driver_instance
    with _driver_lock:
        if _driver_instance is None:
            _driver_instance = _Driver()
        return _driver_instance


def _storage_extent(t: Any) -> Tuple[int, int]:
    storage = t.untyped_storage()
    return int(storage.data_ptr()), int(storage.nbytes())


def export_with_driver(t: Any) -> IpcAllocation:
    """The cudaMalloc allocation holding tensor t: cuMemGetAddressRange + cuIpcGetMemHandle."""
    device_index = _device_of(t, "tensor")
    drv = _driver()
    base, size = drv.address_range(device_index, int(t.data_ptr()))
    return IpcAllocation(drv.ipc_handle(device_index, base), base, size, "cuda driver")


def normalize_torch_ipc_handle(handle: bytes) -> bytes:
    """The 64-byte cudaIpcMemHandle_t inside what torch's _share_cuda_ answers."""
    handle = bytes(handle)
    if len(handle) == CUDA_IPC_HANDLE_BYTES:
        return handle  # torch < 2.5: the raw handle
    if len(handle) == CUDA_IPC_HANDLE_BYTES + 2 and handle[1] == _SHAREABLE_CUDA_MALLOC:
        return handle[2:]  # version byte, type 'c', raw handle
    if len(handle) >= 2 and handle[1] == _SHAREABLE_EXPANDABLE_SEGMENT:
        raise ValueError("the KV cache lives in a PyTorch expandable segment, which legacy CUDA "
                         "IPC cannot export: unset expandable_segments in PYTORCH_CUDA_ALLOC_CONF")
    raise ValueError(f"unrecognized torch IPC handle ({len(handle)} bytes, "
                     f"starting {handle[:2].hex()})")


def _snapshot_segment_size(device_index: int, base: int) -> Optional[int]:
    import torch

    for seg in torch.cuda.memory_snapshot():
        if int(seg.get("device", device_index)) == device_index and int(seg.get("address", -1)) == base:
            return int(seg["total_size"])
    return None


def export_with_torch(t: Any) -> IpcAllocation:
    """The caching-allocator segment of tensor t via untyped_storage()._share_cuda_()."""
    device_index = _device_of(t, "tensor")
    storage = t.untyped_storage()
    info = storage._share_cuda_()  # (device, handle, size, offset_bytes, ref counter, ...)
    handle = normalize_torch_ipc_handle(info[1])
    base = int(storage.data_ptr()) - int(info[3])
    try:
        drv_base, size = _driver().address_range(device_index, base)
        if drv_base != base:
            raise ValueError(f"torch's segment base {base:#x} differs from the driver's "
                             f"allocation base {drv_base:#x}")
        source = "torch _share_cuda_ + cuda driver size"
    except CudaDriverError:
        size = _snapshot_segment_size(device_index, base)
        source = "torch _share_cuda_ + memory_snapshot size"
        if size is None:  # Lower bound: enough for the daemon's range checks.
            size = int(info[3]) + int(storage.nbytes())
            source = "torch _share_cuda_ + storage extent"
    return IpcAllocation(handle, base, size, source)


def _resolve_exporter(exporter: Union[str, Exporter]) -> Exporter:
    if callable(exporter):
        return exporter
    if exporter == "driver":
        return export_with_driver
    if exporter == "torch":
        return export_with_torch
    raise ValueError(f"exporter must be 'driver', 'torch' or a callable, got {exporter!r}")


# ---------------------------------------------------------------------- IPC events


class IpcEventPool:
    """A few interprocess CUDA events of one device, recorded round-robin.

    The engine records one after the forward pass that wrote the blocks it stores, on the
    stream that ran it, and passes the answer of record() as the store's wait_event. Reusing
    an event is safe: a re-record on the same stream only makes the daemon wait for later
    work, never for less.
    """

    def __init__(self, device_index: int, size: int = 4) -> None:
        if not 1 <= size <= 64:
            raise ValueError(f"an IPC event pool holds 1..64 events, got {size}")
        import torch

        self.device_index = int(device_index)
        with torch.cuda.device(self.device_index):
            self.events = [torch.cuda.Event(interprocess=True) for _ in range(size)]
            self.handles: List[bytes] = [bytes(e.ipc_handle()) for e in self.events]
        for h in self.handles:
            if len(h) != CUDA_IPC_HANDLE_BYTES:
                raise ValueError(f"torch answered a {len(h)}-byte IPC event handle")
        self._next = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.events)

    def record(self, stream: Any = None) -> int:
        """Record the next event on `stream` (default: the device's current stream).

        Returns the store's wait_event value: 1 + the event's index.
        """
        import torch

        with self._lock:
            index = self._next
            self._next = (index + 1) % len(self.events)
        with torch.cuda.device(self.device_index):
            self.events[index].record(stream)
        return index + 1


class LayerFlags:
    """One 8-byte word per layer in GPU memory, for layer-wise loads (sent with the
    registration as CudaKvMemory.layer_flags; layers are the pieces' distinct `layer`
    values, ascending: one word for a cross-layer cache).

    A layer-wise load (Session.submit_load(..., layer_flag_value=v)) makes the daemon write
    v into layer i's word once layer i's blocks landed, on its own copy stream; wait(i, v)
    makes an engine stream wait on the GPU until the word is >= v (no CPU wait, no ordering
    between the submit and the wait). Values only grow: next_value() per load, one load of
    the registration at a time.
    """

    def __init__(self, device_index: int, layers: Sequence[int],
                 exporter: Union[str, Exporter] = "driver") -> None:
        import torch

        self.layers = sorted(set(int(x) for x in layers))
        self.index = {layer: i for i, layer in enumerate(self.layers)}
        self.device_index = int(device_index)
        self.words = torch.zeros(len(self.layers), dtype=torch.int64,
                                 device=f"cuda:{self.device_index}")
        alloc = _resolve_exporter(exporter)(self.words)
        self.ptr = int(self.words.data_ptr())
        self.ipc_handle = alloc.handle
        self.offset = self.ptr - alloc.base
        self.allocation_bytes = alloc.size
        self._value = 0
        self._lock = threading.Lock()
        self._side: Any = None  # release()'s stream

    def __len__(self) -> int:
        return len(self.layers)

    def to_proto(self) -> Any:
        return pb.CudaLayerFlags(ipc_handle=self.ipc_handle, offset=self.offset,
                                 allocation_bytes=self.allocation_bytes)

    def next_value(self) -> int:
        """The value for the next layer-wise load (1, 2, ...; below 2**32)."""
        with self._lock:
            self._value += 1
            return self._value

    def wait(self, layer: int, value: int, stream: Any = None) -> None:
        """Make `stream` (default: the current stream) wait until the layer landed."""
        import torch

        s = stream or torch.cuda.current_stream()
        _driver().stream_wait_value64(int(s.cuda_stream), self.ptr + 8 * self.index[layer],
                                      int(value))

    def wait_all(self, value: int, stream: Any = None) -> None:
        """Make `stream` wait for every layer (when no per-layer hook will run)."""
        for layer in self.layers:
            self.wait(layer, value, stream)

    def release(self, value: int) -> None:
        """After a failed or lost load (e.g. the daemon died before writing every word):
        write `value` into every word from this process, on a stream of its own, so that
        streams waiting for it go on (the caller reports those blocks failed)."""
        import torch

        with torch.cuda.device(self.device_index):
            if self._side is None:
                self._side = torch.cuda.Stream()
            with torch.cuda.stream(self._side):
                self.words.clamp_(min=int(value))


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


def flatten_tensors(kv_caches: Any) -> List[Any]:
    """Every tensor of a kv_caches argument (to keep references)."""
    if _is_tensor_like(kv_caches):
        return [kv_caches]
    if isinstance(kv_caches, Mapping):
        return [t for v in kv_caches.values() for t in flatten_tensors(v)]
    if isinstance(kv_caches, (list, tuple)):
        return [t for v in kv_caches for t in flatten_tensors(v)]
    return []


def checked_block_ids(keys: Sequence[bytes], block_ids: Any,
                      num_blocks: Optional[int]) -> List[int]:
    """block_ids as a list of ints, one per key, each in range; ValueError / TypeError early.

    The common case (a list of ints in range) is checked with a few whole-list operations:
    this runs on the engine's step for every submit."""
    if hasattr(block_ids, "tolist"):  # numpy arrays, torch tensors
        block_ids = block_ids.tolist()
    ids = list(block_ids)
    if len(ids) != len(keys):
        raise ValueError(f"{len(keys)} keys but {len(ids)} block ids")
    limit = min(num_blocks, 1 << 32) if num_blocks is not None else 1 << 32
    if ids and set(map(type, ids)) == {int} and min(ids) >= 0 and max(ids) < limit:
        return ids
    out = []
    for i, b in enumerate(ids):
        if isinstance(b, bool) or not isinstance(b, int):
            try:
                b = int(b.__index__())
            except (AttributeError, TypeError):
                raise TypeError(f"block_ids[{i}] must be an int, got {type(b).__name__}") from None
        if b < 0 or b >= limit:
            has = f" (the registration has {num_blocks} blocks)" if num_blocks is not None else ""
            raise ValueError(f"block_ids[{i}] = {b} is out of range{has}")
        out.append(b)
    return out


def block_transfers(keys: Sequence[bytes], block_ids: Any, num_blocks: Optional[int]) -> List[Any]:
    """BlockTransfer messages for (key, block id) pairs (daemons without packed_transfers)."""
    ids = checked_block_ids(keys, block_ids, num_blocks)
    return [pb.BlockTransfer(key=k, block_id=b) for k, b in zip(keys, ids)]
