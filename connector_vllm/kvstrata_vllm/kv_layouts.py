"""vLLM's KV cache layouts: where each block's bytes are in vLLM's KV tensors.

kv_cache_pieces() turns the KV caches vLLM hands the connector into kvstrata pieces
(kvstrata.TensorPiece, see kvstrata.kv_pieces), by the namespace's kv_layout
(kv_layout_name() of vLLM's config):

- "vllm_nhd" / "vllm_hnd": per-layer caches (register_kv_caches), a dict layer_name ->
  tensor (ordered by the layer number in the name, layer_names()) or a list in layer
  order; the i-th is layer i. Per tensor:
    [2, num_blocks, ...] (FlashAttention and most backends; NHD [2, N, block_size,
      kv_heads, head_size] or HND [2, N, kv_heads, block_size, head_size]): K and V are two
      pieces per layer (kv_index 0 and 1);
    [num_blocks, 2, ...] (FlashInfer): K and V of a block are adjacent, one piece per layer;
    [num_blocks, ...] (MLA, 3-D): one piece per layer.
  Permuted views (vLLM's stride order for HND, e.g. logical [2, N, block_size, heads,
  head_size] over physical [2, N, heads, block_size, head_size]) are fine: a piece only has
  to be dense within a block; its bytes are copied in memory order. When K/V and block
  dims are both of size 2, pass block_dim (1 for [2, N, ...], 0 for [N, 2, ...]).
- "vllm_cross_layer": one tensor holding every layer (register_cross_layers_kv_cache),
  blocks outermost in memory (e.g. [num_blocks, num_layers, 2, block_size, kv_heads,
  head_size]): one piece per block. The block dim is the dim with the largest stride
  unless block_dim says otherwise.

The worker registers the pieces with the daemon (CUDA engines) or copies through them
(host_cache.HostCache, CPU engines); either way a block's bytes are its pieces in this
order, so CPU and GPU engines store the same blocks.
"""
from __future__ import annotations

import re
from typing import Any, List, Mapping, Optional, Tuple

from kvstrata import TensorPiece, tensor_pieces

PER_LAYER = ("vllm_nhd", "vllm_hnd")
CROSS_LAYER = "vllm_cross_layer"


def kv_layout_name(vllm_config: Any) -> str:
    """The namespace's kv_layout from vLLM's resolved KV cache layout name.

    Names list dims outermost first (e.g. LBNHC: layers, blocks, tokens, heads, channels);
    blocks outermost means one cross-layer tensor; heads before tokens means HND."""
    name = str(getattr(vllm_config.cache_config, "kv_cache_layout", None) or "NHD").upper()
    name = {"NHD": "LBNHC", "HND": "LBHNC"}.get(name, name)
    if name.startswith("B"):
        return CROSS_LAYER
    if "H" in name and "N" in name and name.index("H") < name.index("N"):
        return "vllm_hnd"
    return "vllm_nhd"


def _natural_key(name: str) -> Tuple:
    return tuple(int(tok) if tok.isdigit() else tok for tok in re.split(r"(\d+)", name))


def layer_names(kv_caches: Mapping) -> List[Any]:
    """The keys of a dict of per-layer caches in layer order: kv_cache_pieces gives the
    caches of the i-th of them `layer` i (ordered by the numbers in the keys)."""
    return sorted(kv_caches, key=lambda k: _natural_key(str(k)))


def kv_cache_pieces(kv_caches: Any, kv_layout: str, *,
                    block_dim: Optional[int] = None) -> List[TensorPiece]:
    """vLLM's KV caches as pieces, in a block's byte order (see the module docstring).

    kv_layout: the namespace's ("vllm_nhd", "vllm_hnd": per-layer caches;
    "vllm_cross_layer": one tensor). block_dim overrides the block dim where the shape is
    ambiguous. ValueError / TypeError for caches that do not fit.
    """
    if kv_layout == CROSS_LAYER:
        return _cross_layer_pieces(kv_caches, block_dim)
    if kv_layout in PER_LAYER:
        return _per_layer_pieces(kv_caches, block_dim)
    raise ValueError(f"unknown layout {kv_layout!r}; expected one of: "
                     f"{', '.join(sorted(PER_LAYER + (CROSS_LAYER,)))}")


def _tensor_list(kv_caches: Any, what: str) -> List[Tuple[str, Any]]:
    """(name, tensor) pairs: a dict ordered by the layer numbers in its keys, a list, or
    one tensor."""
    if isinstance(kv_caches, Mapping):
        return [(f"{what}[{n!r}]", kv_caches[n]) for n in layer_names(kv_caches)]
    if isinstance(kv_caches, (list, tuple)):
        return [(f"{what}[{i}]", t) for i, t in enumerate(kv_caches)]
    return [(what, kv_caches)]


def _shape(t: Any, what: str) -> Tuple[int, ...]:
    try:
        return tuple(int(s) for s in t.shape)
    except (AttributeError, TypeError) as err:
        raise TypeError(f"{what}: expected a torch.Tensor, got {type(t).__name__}") from err


def _per_layer_pieces(kv_caches: Any, block_dim: Optional[int]) -> List[TensorPiece]:
    if not isinstance(kv_caches, (Mapping, list, tuple)):
        raise TypeError("per-layer layouts ('vllm_nhd', 'vllm_hnd') take per-layer caches (a "
                        f"dict or list of tensors), got {type(kv_caches).__name__}; use "
                        f"kv_layout='{CROSS_LAYER}' for one cross-layer tensor")
    out: List[TensorPiece] = []
    for layer, (what, t) in enumerate(_tensor_list(kv_caches, "kv_caches")):
        shape = _shape(t, what)
        nd = len(shape)
        if block_dim is not None and nd:
            b = block_dim % nd
            other = 1 - b if b in (0, 1) else None
            kv = other if (other is not None and nd >= 4 and shape[other] == 2) else None
        elif nd >= 4 and shape[0] == 2:
            kv, b = 0, 1           # [2, N, ...]: K/V split first
        elif nd >= 4 and shape[1] == 2:
            kv, b = 1, 0           # [N, 2, ...]: FlashInfer
        else:
            kv, b = None, 0        # [N, ...]: MLA and other single-component caches
        out += tensor_pieces(t, block_dim=b, kv_dim=kv, layer=layer, what=what)
    return out


def _cross_layer_pieces(kv_caches: Any, block_dim: Optional[int]) -> List[TensorPiece]:
    tensors = _tensor_list(kv_caches, "kv_caches")
    if len(tensors) != 1:
        raise ValueError(f"layout '{CROSS_LAYER}' takes one tensor, got {len(tensors)}")
    what, t = tensors[0]
    return tensor_pieces(t, block_dim=block_dim, what=what)
