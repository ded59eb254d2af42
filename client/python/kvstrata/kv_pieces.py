"""KV tensors as pieces: where each block's bytes are, engine-neutral.

The daemon sees an engine's KV cache as *pieces*. A piece is a dense per-block region of
one tensor: num_blocks regions of piece_bytes contiguous bytes, block_stride bytes apart,
the first at `ptr`, holding one `layer` and `kv_index` (0 = K or the whole block, 1 = V).
A block's bytes are its pieces back to back, in the order given: that is the block's byte
order in the daemon's tiers, so it must be the same wherever the block is stored or loaded.

tensor_pieces() finds the pieces of one tensor from a neutral description: the dim of its
blocks (block_dim; rows_per_block consecutive rows make a block in token-major buffers)
and the dim, if any, that holds K and V (kv_dim). Which tensors an engine has, their dims
and their order are the engines' knowledge and live in the connectors:
kvstrata_vllm.kv_layouts (vLLM's per-layer and cross-layer caches) and
kvstrata_sglang.device_pool (SGLang's device pool). kvstrata.cuda turns pieces into what
RegisterKvMemory sends (CUDA IPC handles and offsets); vLLM's CPU engine copies through them
(kvstrata_vllm.host_cache).

A tensor is anything with torch.Tensor's shape, stride(), element_size() and data_ptr():
this module imports no torch.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, List, Optional, Tuple


@dataclass(frozen=True)
class TensorPiece:
    """A dense per-block region of one tensor: block b's bytes are
    [ptr + b * block_stride, + piece_bytes)."""

    tensor: Any = field(compare=False, repr=False)  # the tensor it is in (kept alive)
    ptr: int                # address of block 0's bytes
    num_blocks: int
    block_stride: int       # bytes between consecutive blocks
    piece_bytes: int        # contiguous bytes of one block
    layer: int = 0
    kv_index: int = 0       # 0 = K (or the whole block), 1 = V
    what: str = "tensor"    # the tensor's name in error messages


@dataclass(frozen=True)
class _View:
    """Strided view of memory: address of element 0, shape, strides (elements)."""

    ptr: int
    shape: Tuple[int, ...]
    strides: Tuple[int, ...]
    itemsize: int
    what: str

    def select(self, dim: int, index: int, what: str) -> "_View":
        return _View(self.ptr + index * self.strides[dim] * self.itemsize,
                     self.shape[:dim] + self.shape[dim + 1:],
                     self.strides[:dim] + self.strides[dim + 1:], self.itemsize, what)

    def split_rows(self, dim: int, rows: int) -> "_View":
        """dim as [size // rows, rows]: blocks of `rows` consecutive rows."""
        n = self.shape[dim]
        if n % rows:
            raise ValueError(f"{self.what}: {n} rows along dim {dim} is not a multiple of "
                             f"rows_per_block={rows}")
        st = self.strides[dim]
        return _View(self.ptr, self.shape[:dim] + (n // rows, rows) + self.shape[dim + 1:],
                     self.strides[:dim] + (st * rows, st) + self.strides[dim + 1:],
                     self.itemsize, self.what)


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


def _dim(view: _View, dim: int, name: str) -> int:
    if not -len(view.shape) <= dim < len(view.shape):
        raise ValueError(f"{view.what}: {name} {dim} out of range for shape {list(view.shape)}")
    return dim % len(view.shape)


def _block_piece(tensor: Any, view: _View, block_dim: int, layer: int,
                 kv_index: int) -> TensorPiece:
    """The piece of `view` with blocks along block_dim; every other dim must be dense."""
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
    return TensorPiece(tensor, view.ptr, num_blocks, block_stride, piece_bytes, layer,
                       kv_index, view.what)


def tensor_pieces(tensor: Any, *, block_dim: Optional[int] = None,
                  kv_dim: Optional[int] = None, rows_per_block: int = 1, layer: int = 0,
                  kv_index: int = 0, what: str = "tensor") -> List[TensorPiece]:
    """The pieces of one KV tensor (one, or K and V), in block order K then V.

    block_dim: the dim of the blocks; None: the dim with the largest stride (blocks
    outermost in memory; the first on ties, dims of size 1 aside). Every other dim must be
    dense within a block (permuted views are fine: a block's bytes are taken in memory
    order). rows_per_block: a block is that many consecutive rows along block_dim
    (token-major buffers: tokens of a page); the dim's size must be a multiple.
    kv_dim: a dim of size 2 holding K and V. Where K and V of a block are apart in memory
    (kv_dim's stride larger than block_dim's) they are two pieces, kv_index 0 and 1; where
    they are adjacent, one piece of both (kv_index 0). layer and, without kv_dim, kv_index
    are recorded in the pieces. what: the tensor's name in error messages.
    ValueError / TypeError for a tensor that does not fit.
    """
    if isinstance(rows_per_block, bool) or not isinstance(rows_per_block, int) \
            or rows_per_block < 1:
        raise ValueError(f"{what}: rows_per_block must be an int >= 1, got {rows_per_block!r}")
    v = _view_of(tensor, what)
    if block_dim is None:
        candidates = [d for d, n in enumerate(v.shape) if n != 1] or [0]
        b = max(candidates, key=lambda d: (v.strides[d], -d))
    else:
        b = _dim(v, block_dim, "block_dim")
    kv = None
    if kv_dim is not None:
        kv = _dim(v, kv_dim, "kv_dim")
        if kv == b or v.shape[kv] != 2:
            raise ValueError(f"{what}: kv_dim {kv_dim} must be a dim of size 2 other than the "
                             f"block dim {b} (shape {list(v.shape)})")
    if rows_per_block != 1:
        v = v.split_rows(b, rows_per_block)
        if kv is not None and kv > b:
            kv += 1
    if kv is not None and v.strides[kv] > v.strides[b]:
        b_sub = b - 1 if kv < b else b
        return [_block_piece(tensor, v.select(kv, k, f"{what}[{'K' if k == 0 else 'V'}]"),
                             b_sub, layer, k) for k in (0, 1)]
    return [_block_piece(tensor, v, b, layer, 0 if kv is not None else kv_index)]
