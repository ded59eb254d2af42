"""The KVStrata namespaces of a vLLM KV cache: one per KV cache group, pipeline stage and
tensor-parallel rank (stages.py: which ranks, which layers per stage).

The scheduler and every worker derive the same specs from vLLM's config and KV cache config,
so the scheduler can look up each rank's namespaces and a worker stores into its own. A
stored unit holds `tokens_per_unit` tokens (a multiple of vLLM's block size) of every layer
of one group of the rank (its stage's layers); its key is the vLLM block hash of its last
block (hashes chain, so that key names the whole prefix, cache_salt and LoRA included). A
hybrid model (vLLM's hybrid KV cache manager: full-attention and sliding-window layers in
separate groups) has one namespace per group, told apart by the spec's kv_group.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .config import ConnectorConfig

MAX_KEY_BYTES = 32


@dataclass(frozen=True)
class CacheGeometry:
    """What the connector needs from one KV cache group's spec."""

    block_size: int
    num_layers: int
    num_kv_heads: int
    head_size: int
    dtype: str                 # torch dtype name without "torch."
    mla: bool
    page_bytes: int            # bytes of one vLLM block of one layer, padding included

    @property
    def block_bytes(self) -> int:
        """Bytes of one vLLM block across the group's layers of the rank."""
        return self.page_bytes * self.num_layers


# vLLM KV cache spec classes by what the connector does with their groups. A full-attention
# spec with `sliding_window` set is what --disable-hybrid-kv-cache-manager makes of a
# sliding-window layer: vLLM keeps every block, so it is served as full attention.
_FULL_SPECS = ("FullAttentionSpec", "MLAAttentionSpec")
_WINDOW_SPECS = ("SlidingWindowSpec", "SlidingWindowMLASpec")
# Group kinds refused at start-up, with what they are.
_REFUSED_SPECS = {
    "MambaSpec": "linear-attention / Mamba state (e.g. Qwen3-Next)",
    "ChunkedLocalAttentionSpec": "chunked local attention (e.g. Llama 4)",
    "SinkFullAttentionSpec": "full attention with static sink tokens",
    "RSWASpec": "R-SWA (a window that evicts the middle of the prompt)",
    "CrossAttentionSpec": "cross-attention (encoder-decoder)",
    "EncoderOnlyAttentionSpec": "encoder-only attention",
    "UniformTypeKVCacheSpecs": "layers of different geometries in one group",
}


@dataclass(frozen=True)
class KvGroup:
    """One of vLLM's KV cache groups: full-attention layers need a hit's whole prefix, a
    sliding-window group only the blocks inside the window before the first token to
    compute (vLLM frees, and points at its null block, every block before that)."""

    index: int
    count: int                    # groups of the engine
    layer_names: Tuple[str, ...]
    geometry: CacheGeometry
    sliding_window: int = 0       # tokens; 0 = full attention

    @property
    def label(self) -> str:
        """The namespace's kv_group: "" for an engine with one group (fingerprints of
        single-group engines are as before), else e.g. "1/2:sliding_window=128"."""
        if self.count == 1:
            return ""
        kind = f"sliding_window={self.sliding_window}" if self.sliding_window else "full"
        return f"{self.index}/{self.count}:{kind}"

    @property
    def replicated(self) -> bool:
        """MLA: every tensor-parallel rank (of a stage) holds the same latent KV, so the
        ranks share one namespace (tp_rank 0 of the engine's tp_size), rank 0 stores it
        once and every rank loads it."""
        return self.geometry.mla

    def first_needed_token(self, computed_tokens: int) -> int:
        """The first token whose KV the next token's attention reads after
        `computed_tokens` tokens (vLLM's get_num_skipped_tokens)."""
        if not self.sliding_window:
            return 0
        return max(0, computed_tokens - self.sliding_window + 1)


def _geometry(spec: Any, layers: int) -> CacheGeometry:
    return CacheGeometry(block_size=int(spec.block_size), num_layers=layers,
                         num_kv_heads=int(spec.num_kv_heads), head_size=int(spec.head_size),
                         dtype=str(spec.dtype).replace("torch.", ""),
                         mla="MLA" in type(spec).__name__, page_bytes=int(spec.page_size_bytes))


def kv_groups(kv_cache_config: Any) -> List[KvGroup]:
    """The KV cache groups of vLLM's KVCacheConfig; ValueError, one line naming the group,
    its kind and what to do, for a group the connector cannot serve."""
    groups = list(getattr(kv_cache_config, "kv_cache_groups", []) or [])
    if not groups:
        raise ValueError("KVStrataConnector: the KV cache config has no KV cache groups")
    out: List[KvGroup] = []
    for i, g in enumerate(groups):
        spec = g.kv_cache_spec
        kind = type(spec).__name__
        layers = tuple(str(n) for n in g.layer_names)
        where = f"KV cache group {i} of {len(groups)} ({len(layers)} layers, e.g. " \
                f"{layers[0] if layers else '?'!r})"
        if kind in _REFUSED_SPECS or kind not in _FULL_SPECS + _WINDOW_SPECS:
            what = _REFUSED_SPECS.get(kind, "a KV cache kind KVStrata does not know")
            raise ValueError(
                f"KVStrataConnector cannot serve {where}: {kind}, {what}. Serve this model "
                f"without KVStrata (drop --kv-transfer-config) or with vLLM's own "
                f"OffloadingConnector")
        window = int(getattr(spec, "sliding_window", 0) or 0) if kind in _WINDOW_SPECS else 0
        out.append(KvGroup(index=i, count=len(groups), layer_names=layers,
                           geometry=_geometry(spec, len(layers)), sliding_window=window))
    sizes = {g.geometry.block_size for g in out}
    if len(sizes) != 1:
        raise ValueError(f"KVStrataConnector needs one block size in every KV cache group, got "
                         f"{sorted(sizes)}; set --block-size to one value for all layers")
    return out


def _dtype_bytes(dtype: str) -> int:
    return {"float16": 2, "bfloat16": 2, "float32": 4, "float8_e4m3fn": 1,
            "float8_e5m2": 1, "uint8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}.get(dtype, 0)


# vLLM's --kv-cache-dtype values whose bytes KVStrata names exactly. vLLM keeps every fp8
# cache in torch.uint8 tensors (its spec's dtype says uint8 for e4m3 and e5m2 alike), so the
# namespace's dtype comes from the cache dtype, not from the spec.
_FP8_CACHE_DTYPES = {"fp8": "fp8_e4m3", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2"}


def cache_dtype(vllm_config: Any) -> Optional[str]:
    """The namespace dtype of vLLM's --kv-cache-dtype when the KV cache spec cannot tell it
    (fp8 kinds), else None; ValueError, one line, for a cache whose bytes are not the same
    in two engine processes or that KVStrata cannot name."""
    cache = getattr(vllm_config, "cache_config", None)
    name = str(getattr(cache, "cache_dtype", "auto") or "auto")
    if name in ("auto", "float16", "bfloat16", "float32"):
        return None
    if name not in _FP8_CACHE_DTYPES:
        raise ValueError(f"KVStrataConnector cannot serve --kv-cache-dtype {name}: KVStrata "
                         f"cannot tell its bytes apart from other caches'; use auto, fp8, "
                         f"fp8_e4m3 or fp8_e5m2")
    if getattr(cache, "calculate_kv_scales", False):
        raise ValueError("KVStrataConnector cannot serve an fp8 KV cache with "
                         "calculate_kv_scales: each engine process computes its own scales, "
                         "so its bytes mean nothing to another; load the scales from the "
                         "checkpoint (the default) instead")
    return _FP8_CACHE_DTYPES[name]


def namespace_fields(group: KvGroup, cfg: ConnectorConfig, model: str,
                     unit_tokens: int, tp_size: int, tp_rank: int,
                     layout: str, kv_dtype: Optional[str] = None, pp_size: int = 1,
                     pp_rank: int = 0) -> Dict[str, Any]:
    """NamespaceSpec fields (kvstrata.namespace_spec keywords) of one KV cache group of one
    rank of one pipeline stage: the group's layers of that stage (stages.stage_groups), and
    its kv_group label when the engine has several groups.
    kv_dtype: cache_dtype(vllm_config), the dtype of an fp8 cache (its spec says uint8).

    When vLLM's pages are padded or otherwise not the plain K/V geometry, the namespace is
    KV_LAYOUT_OPAQUE with the exact bytes (still keyed by model, dtype, layers, ranks)."""
    geometry = group.geometry
    blocks_per_unit = unit_tokens // geometry.block_size
    fields: Dict[str, Any] = dict(
        engine="vllm", model=model, num_layers=geometry.num_layers,
        num_kv_heads=geometry.num_kv_heads, head_size=geometry.head_size,
        tokens_per_block=unit_tokens, tp_size=tp_size,
        tp_rank=0 if group.replicated else tp_rank, pp_size=pp_size, pp_rank=pp_rank,
        attention="mla" if geometry.mla else "mha")
    if group.label:
        fields["kv_group"] = group.label
    dtype = kv_dtype or (geometry.dtype if _dtype_bytes(geometry.dtype) else "uint8")
    plain = (geometry.num_kv_heads * geometry.head_size * geometry.block_size
             * _dtype_bytes(dtype) * (1 if geometry.mla else 2))
    fields["dtype"] = dtype
    if plain == geometry.page_bytes and (dtype == geometry.dtype or kv_dtype):
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
