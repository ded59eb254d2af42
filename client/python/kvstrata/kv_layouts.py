"""The engines' KV cache layouts: where each block's bytes are in an engine's KV tensors.

kvstrata.cuda.describe_kv_caches turns an engine's KV tensors into pieces; this module
knows the engines' tensor shapes, by `layout`:

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
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, List, Mapping, Optional, Tuple

_LAYOUT_ALIASES = {
    "vllm": "vllm", "vllm_nhd": "vllm", "vllm_hnd": "vllm", "vllm_flashinfer": "vllm",
    "vllm_cross_layer": "cross_layer", "cross_layer": "cross_layer",
    "sglang": "sglang", "sglang_mha": "sglang", "sglang_mla": "sglang",
}
LAYOUTS = tuple(sorted(_LAYOUT_ALIASES))


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
