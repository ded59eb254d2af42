"""The KVStrata namespace of a vLLM KV cache: one per tensor-parallel rank.

The scheduler and every worker derive the same spec from vLLM's config and KV cache config,
so the scheduler can look up each rank's namespace and a worker stores into its own. A
stored unit holds `tokens_per_unit` tokens (a multiple of vLLM's block size) of every layer
of the rank; its key is the vLLM block hash of its last block (hashes chain, so that key
names the whole prefix, cache_salt and LoRA included).
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

from .config import ConnectorConfig

MAX_KEY_BYTES = 32


@dataclass(frozen=True)
class CacheGeometry:
    """What the connector needs from vLLM's KV cache config (one attention group)."""

    block_size: int
    num_layers: int
    num_kv_heads: int
    head_size: int
    dtype: str                 # torch dtype name without "torch."
    mla: bool
    page_bytes: int            # bytes of one vLLM block of one layer, padding included

    @property
    def block_bytes(self) -> int:
        """Bytes of one vLLM block across the rank's layers."""
        return self.page_bytes * self.num_layers


def cache_geometry(kv_cache_config: Any) -> CacheGeometry:
    """The geometry of vLLM's KVCacheConfig; ValueError for layouts the connector lacks."""
    groups = list(getattr(kv_cache_config, "kv_cache_groups", []) or [])
    if len(groups) != 1:
        raise ValueError(f"KVStrataConnector supports one KV cache group (full attention "
                         f"models), got {len(groups)} groups")
    spec = groups[0].kv_cache_spec
    for name in ("block_size", "num_kv_heads", "head_size", "dtype", "page_size_bytes"):
        if not hasattr(spec, name):
            raise ValueError(f"KVStrataConnector needs an attention KV cache spec, got "
                             f"{type(spec).__name__}")
    if getattr(spec, "sliding_window", None):
        raise ValueError("KVStrataConnector does not support sliding-window KV caches")
    mla = type(spec).__name__.startswith("MLA")
    return CacheGeometry(block_size=int(spec.block_size),
                         num_layers=len(groups[0].layer_names),
                         num_kv_heads=int(spec.num_kv_heads), head_size=int(spec.head_size),
                         dtype=str(spec.dtype).replace("torch.", ""), mla=mla,
                         page_bytes=int(spec.page_size_bytes))


def _dtype_bytes(dtype: str) -> int:
    return {"float16": 2, "bfloat16": 2, "float32": 4, "float8_e4m3fn": 1,
            "float8_e5m2": 1, "uint8": 1}.get(dtype, 0)


def namespace_fields(geometry: CacheGeometry, cfg: ConnectorConfig, model: str,
                     unit_tokens: int, tp_size: int, tp_rank: int,
                     layout: str) -> Dict[str, Any]:
    """NamespaceSpec fields (kvstrata.namespace_spec keywords) of one rank.

    When vLLM's pages are padded or otherwise not the plain K/V geometry, the namespace is
    KV_LAYOUT_OPAQUE with the exact bytes (still keyed by model, dtype, layers, ranks)."""
    blocks_per_unit = unit_tokens // geometry.block_size
    fields: Dict[str, Any] = dict(
        engine="vllm", model=model, num_layers=geometry.num_layers,
        num_kv_heads=geometry.num_kv_heads, head_size=geometry.head_size,
        tokens_per_block=unit_tokens, tp_size=tp_size, tp_rank=tp_rank, pp_size=1, pp_rank=0,
        attention="mla" if geometry.mla else "mha")
    plain = (geometry.num_kv_heads * geometry.head_size * geometry.block_size
             * _dtype_bytes(geometry.dtype) * (1 if geometry.mla else 2))
    dtype = geometry.dtype if _dtype_bytes(geometry.dtype) else "uint8"
    fields["dtype"] = dtype
    if plain == geometry.page_bytes and dtype == geometry.dtype:
        fields["kv_layout"] = layout
    else:
        fields["kv_layout"] = "opaque"
        fields["opaque_block_bytes"] = geometry.block_bytes * blocks_per_unit
    fields.update(cfg.namespace)  # model / salt / engine overrides (validated in config)
    return fields


def unit_key(block_hash: Any) -> bytes:
    """The daemon key of a unit from vLLM's block hash of its last block (<= 32 bytes)."""
    raw = bytes(block_hash)
    return raw if 0 < len(raw) <= MAX_KEY_BYTES else hashlib.blake2b(raw, digest_size=32).digest()


def unit_keys(block_hashes: Sequence[Any], unit_tokens: int, hash_tokens: int, first: int,
              end: int) -> List[bytes]:
    """Keys of units [first, end): the hash of the last hashed token range of each unit
    (vLLM hashes every `hash_tokens` tokens: the block size or prefix_match_unit)."""
    return [unit_key(block_hashes[(u + 1) * unit_tokens // hash_tokens - 1])
            for u in range(first, end)]


def hash_tokens(vllm_config: Any, block_size: int) -> int:
    """Tokens per entry of request.block_hashes (prefix_match_unit when set, else the block
    size); ValueError when it does not divide the block size."""
    unit = getattr(vllm_config.cache_config, "prefix_match_unit", None) or block_size
    if block_size % unit:
        raise ValueError(f"prefix_match_unit {unit} must divide the block size {block_size}")
    return int(unit)


def hash_seed_problem(vllm_config: Any) -> Optional[str]:
    """Why vLLM's block hashes (the connector's keys) differ between processes, or None.

    Every prefix's hash chain starts from vLLM's NONE_HASH. vLLM 0.26 draws it at random
    per process unless PYTHONHASHSEED is set; vLLM >= 0.27 derives it from a fixed seed for
    sha256 / sha256_cbor (random for xxhash without PYTHONHASHSEED). A random one means
    another instance -- or this one after a restart -- never finds what this one stored."""
    if os.environ.get("PYTHONHASHSEED") is not None:
        return None
    algo = str(getattr(vllm_config.cache_config, "prefix_caching_hash_algo", "sha256"))
    try:
        from vllm.v1.core import kv_cache_utils  # noqa: PLC0415
    except ImportError:  # pragma: no cover - always there where the connector runs
        return None
    if not hasattr(kv_cache_utils, "resolve_none_hash_seed"):  # vLLM 0.26: random seed
        return "this vLLM seeds its block hashes at random in every process"
    if algo.startswith("xxhash"):
        return f"prefix_caching_hash_algo={algo} seeds block hashes at random in every process"
    return None
