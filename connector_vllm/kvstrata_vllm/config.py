"""The connector's options, read and validated from kv_connector_extra_config.

Every option is documented in docs/vllm-connector.md. Bad values raise ValueError at
start-up with the option's name, never later in the serving loop.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Mapping, Optional

# kv_transfer_params key: per-request cap on the tokens KVStrata may store.
MAX_OFFLOAD_TOKENS_PARAM = "max_offload_tokens"
# Namespace fields the connector derives itself; overrides may replace the others only.
_DERIVED_FIELDS = {"tp_size", "tp_rank", "pp_size", "pp_rank", "tokens_per_block",
                   "num_layers", "num_kv_heads", "head_size", "dtype", "kv_layout",
                   "attention", "attention_kind", "opaque_block_bytes"}
_OVERRIDABLE_FIELDS = {"model", "salt", "engine", "engine_kind"}

_KNOWN = {"endpoint", "tokens_per_unit", "offload", "store_threshold_tokens",
          "namespace", "lease_ttl_ms", "reconnect_interval_s", "timeout_s",
          "max_pending_store_bytes", "store_timeout_s", "load_mode", "fast_lookup",
          "full_hit_max_load_tokens", "load_planner"}
# How a hit is loaded: "auto" loads L1 hits of a GPU engine in the step that uses them, layer
# by layer (vLLM's wait_for_layer_load), and anything on disk (or on a CPU engine) before
# the request is scheduled; "sync" loads L1 hits in the step on CPU engines too; "async"
# always loads before the request is scheduled (vLLM's load_async).
LOAD_MODES = ("auto", "sync", "async")
# Whether the load planner (kvstrata.planning) decides how much of each hit to load: "auto"
# on GPU engines, "on" on CPU engines too, "off" loads every hit whole.
PLANNER_MODES = ("auto", "on", "off")


@dataclass(frozen=True)
class ConnectorConfig:
    endpoint: Optional[str] = None          # None: kvstrata.default_endpoint()
    tokens_per_unit: Optional[int] = None   # None: vLLM's block size
    offload: str = "prompt"                 # "prompt" or "all" (decode blocks too)
    store_threshold_tokens: int = 0         # requests with fewer prompt tokens: not stored
    namespace: Dict[str, Any] = field(default_factory=dict)
    lease_ttl_ms: int = 30000
    reconnect_interval_s: float = 5.0
    timeout_s: float = 5.0
    max_pending_store_bytes: int = 1 << 30   # host mode: gathered units awaiting the store
    store_timeout_s: float = 30.0
    load_mode: str = "auto"                 # LOAD_MODES
    fast_lookup: bool = True                # lookups over the daemon's lookup fast path
    # A hit through the unit of the prompt's last token loads that unit too (vLLM then
    # computes the last token alone, on its full CUDA graph) -- in a GPU step that loads
    # layer by layer, only up to this many tokens: a larger load stops one unit short, so
    # that unit's forward pass overlaps the load layer by layer.
    full_hit_max_load_tokens: int = 2048
    load_planner: str = "auto"              # PLANNER_MODES

    def unit_tokens(self, block_size: int) -> int:
        """Tokens per stored unit; ValueError unless a positive multiple of block_size."""
        unit = block_size if self.tokens_per_unit is None else self.tokens_per_unit
        if unit <= 0 or unit % block_size:
            raise ValueError(f"kv_connector_extra_config.tokens_per_unit={unit} must be a "
                             f"positive multiple of vLLM's block size {block_size}")
        return unit


def _int(extra: Mapping[str, Any], name: str, default: int, minimum: int) -> int:
    value = extra.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"kv_connector_extra_config.{name} must be an integer >= {minimum}, "
                         f"got {value!r}")
    return value


def _float(extra: Mapping[str, Any], name: str, default: float, minimum: float) -> float:
    value = extra.get(name, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < minimum:
        raise ValueError(f"kv_connector_extra_config.{name} must be a number >= {minimum}, "
                         f"got {value!r}")
    return float(value)


def parse_config(extra: Optional[Mapping[str, Any]]) -> ConnectorConfig:
    """ConnectorConfig from kv_connector_extra_config; ValueError names the bad option."""
    extra = dict(extra or {})
    unknown = sorted(set(extra) - _KNOWN)
    if unknown:
        raise ValueError(f"kv_connector_extra_config: unknown option(s) {', '.join(unknown)}; "
                         f"known: {', '.join(sorted(_KNOWN))}")
    endpoint = extra.get("endpoint")
    if endpoint is not None and (not isinstance(endpoint, str) or not endpoint):
        raise ValueError(f"kv_connector_extra_config.endpoint must be a non-empty string "
                         f"(a socket path, unix:PATH or host:port), got {endpoint!r}")
    tokens_per_unit = extra.get("tokens_per_unit")
    if tokens_per_unit is not None:
        tokens_per_unit = _int(extra, "tokens_per_unit", 0, 1)
    offload = extra.get("offload", "prompt")
    if offload not in ("prompt", "all"):
        raise ValueError(f"kv_connector_extra_config.offload must be \"prompt\" (prompt "
                         f"blocks only) or \"all\" (decode blocks too), got {offload!r}")
    load_mode = extra.get("load_mode", "auto")
    if load_mode not in LOAD_MODES:
        raise ValueError(f"kv_connector_extra_config.load_mode must be one of "
                         f"{', '.join(LOAD_MODES)}, got {load_mode!r}")
    load_planner = extra.get("load_planner", "auto")
    if load_planner not in PLANNER_MODES:
        raise ValueError(f"kv_connector_extra_config.load_planner must be one of "
                         f"{', '.join(PLANNER_MODES)}, got {load_planner!r}")
    fast_lookup = extra.get("fast_lookup", True)
    if not isinstance(fast_lookup, bool):
        raise ValueError(f"kv_connector_extra_config.fast_lookup must be true or false, got "
                         f"{fast_lookup!r}")
    namespace = extra.get("namespace", {})
    if not isinstance(namespace, Mapping):
        raise ValueError(f"kv_connector_extra_config.namespace must be an object, got "
                         f"{type(namespace).__name__}")
    bad = sorted(set(namespace) - _OVERRIDABLE_FIELDS)
    if bad:
        why = ("derived from vLLM's KV cache and cannot be overridden"
               if set(bad) <= _DERIVED_FIELDS else "not namespace fields")
        raise ValueError(f"kv_connector_extra_config.namespace: {', '.join(bad)} are {why}; "
                         f"overridable: {', '.join(sorted(_OVERRIDABLE_FIELDS))}")
    for key, value in namespace.items():
        if not isinstance(value, str):
            raise ValueError(f"kv_connector_extra_config.namespace.{key} must be a string, "
                             f"got {value!r}")
    return ConnectorConfig(
        endpoint=endpoint, tokens_per_unit=tokens_per_unit, offload=offload,
        store_threshold_tokens=_int(extra, "store_threshold_tokens", 0, 0),
        namespace=dict(namespace),
        lease_ttl_ms=_int(extra, "lease_ttl_ms", 30000, 1000),
        reconnect_interval_s=_float(extra, "reconnect_interval_s", 5.0, 0.0),
        timeout_s=_float(extra, "timeout_s", 5.0, 0.1),
        max_pending_store_bytes=_int(extra, "max_pending_store_bytes", 1 << 30, 0),
        store_timeout_s=_float(extra, "store_timeout_s", 30.0, 0.1), load_mode=load_mode,
        fast_lookup=fast_lookup,
        full_hit_max_load_tokens=_int(extra, "full_hit_max_load_tokens", 2048, 0),
        load_planner=load_planner)


def open_link(cfg: ConnectorConfig, client_name: str,
              on_session: Optional[Callable[[Any], None]] = None) -> Any:
    """The connector's kvstrata.DaemonLink (kvstrata.link): its session, opened lazily,
    never lets the daemon fail vLLM (misses and recompute while it is unreachable)."""
    import kvstrata

    return kvstrata.DaemonLink(
        endpoint=cfg.endpoint, client_name=client_name, timeout=cfg.timeout_s,
        retry_interval_s=cfg.reconnect_interval_s, fast_lookup=cfg.fast_lookup,
        on_session=on_session, log=logging.getLogger("kvstrata_vllm"))


def max_offload_tokens(kv_transfer_params: Optional[Mapping[str, Any]]) -> Optional[int]:
    """The request's kv_transfer_params.max_offload_tokens (None: no cap).

    A bad value (not a non-negative integer) raises ValueError naming the parameter."""
    if not kv_transfer_params or MAX_OFFLOAD_TOKENS_PARAM not in kv_transfer_params:
        return None
    value = kv_transfer_params[MAX_OFFLOAD_TOKENS_PARAM]
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"kv_transfer_params.{MAX_OFFLOAD_TOKENS_PARAM} must be an integer "
                         f">= 0, got {value!r}")
    return value
