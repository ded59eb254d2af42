"""SGLang's device KV pool as kvstrata pieces: where each page's bytes are in the GPU KV
tensors, for an engine that registers them with the daemon (GPU mode:
kvstrata.Session.register_cuda_kv_caches).

layout.py describes the host pool, whose pages this backend stores; this module describes
the device pool (kvstrata.TensorPiece, see kvstrata.kv_pieces), token-major per layer:
- MHA (MHATokenToKVPool): (k_buffers, v_buffers) — or {"k": [...], "v": [...]} — with
  k_buffers[l] of shape [num_tokens, kv_heads, head_dim] (k_buffer / v_buffer);
- MLA (MLATokenToKVPool): one list of per-layer [num_tokens, 1, kv_lora_rank + rope_dim]
  tensors (kv_buffer).
page_size is SGLang's: block b is tokens [b*page_size, (b+1)*page_size), so SGLang's block
ids are its page indices (token index // page_size; page 0 holds SGLang's padding slot).
Pieces are K of every layer, then V of every layer (kv_index 0 / 1): the per-page byte
order of SGLang's page_first_direct host layout ([2, pages, layers, page_size, heads,
head_dim]), so a namespace of these blocks is kv_layout "sglang_page_first_direct".
"""
from __future__ import annotations

from typing import Any, List, Mapping, Tuple

from kvstrata import TensorPiece, tensor_pieces


def device_pool_pieces(buffers: Any, page_size: int) -> List[TensorPiece]:
    """SGLang's device pool buffers as pieces, in a page's byte order (see the module
    docstring). ValueError / TypeError for buffers that do not fit."""
    if isinstance(page_size, bool) or not isinstance(page_size, int) or page_size < 1:
        raise ValueError("SGLang's device pool needs its page_size (the namespace's "
                         f"tokens_per_block), got {page_size!r}")
    groups = _buffer_groups(buffers)
    if len(groups) == 2 and len(groups[0][1]) != len(groups[1][1]):
        raise ValueError(f"sglang: {len(groups[0][1])} K buffers but {len(groups[1][1])} "
                         "V buffers")
    out: List[TensorPiece] = []
    for kv_index, (name, layers) in enumerate(groups):
        for layer, t in enumerate(layers):
            out += tensor_pieces(t, block_dim=0, rows_per_block=page_size, layer=layer,
                                 kv_index=kv_index, what=f"{name}[{layer}]")
    return out


def _buffer_groups(buffers: Any) -> List[Tuple[str, Any]]:
    """(name, per-layer buffers): K then V (MHA), or the one latent buffer list (MLA)."""
    if isinstance(buffers, Mapping):
        keys = {str(k).lower(): k for k in buffers}
        k_key = keys.get("k") or keys.get("k_buffer") or keys.get("k_buffers")
        v_key = keys.get("v") or keys.get("v_buffer") or keys.get("v_buffers")
        if k_key is None or v_key is None:
            raise ValueError("SGLang's MHA pool takes {'k': [...], 'v': [...]} (or "
                             f"(k_buffers, v_buffers)), got keys {sorted(keys)}")
        return [("k_buffer", buffers[k_key]), ("v_buffer", buffers[v_key])]
    if isinstance(buffers, (list, tuple)):
        if len(buffers) == 2 and all(isinstance(g, (list, tuple)) for g in buffers):
            return [("k_buffer", buffers[0]), ("v_buffer", buffers[1])]
        if not any(isinstance(t, (list, tuple, Mapping)) for t in buffers):
            return [("kv_buffer", buffers)]  # MLA: one latent buffer per layer
    raise TypeError("SGLang's device pool takes (k_buffers, v_buffers), {'k': ..., 'v': ...} "
                    f"or one list of per-layer buffers (MLA), got {type(buffers).__name__}")
