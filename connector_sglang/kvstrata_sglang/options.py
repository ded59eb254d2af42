"""Options of the KVStrata HiCache backend, read from SGLang's storage extra-config.

    --hicache-storage-backend dynamic --hicache-storage-backend-extra-config
    '{"backend_name":"kvstrata","module_path":"kvstrata_sglang",
      "class_name":"KVStrataStorage","interface_v1":1, "endpoint":"/run/kvstrata/kvstrata.sock"}'

Every key is checked: an unknown key or a value of the wrong type raises ValueError naming
it (a misspelt "salt" must never silently share pages between tenants).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Optional

# Keys SGLang itself reads from the same dictionary (the factory and the cache controller).
SGLANG_KEYS = frozenset({"backend_name", "module_path", "class_name", "interface_v1",
                         "tp_lcm_size"})
# Whether batch_exists answers only the leading pages worth prefetching (planner.py):
# "auto" when SGLang runs on a GPU, "on" always, "off" answers every page stored.
PLANNER_MODES = ("auto", "on", "off")
MAX_SALT_BYTES = 256
MAX_MODEL_BYTES = 400  # NamespaceSpec.model allows 512; the rest is for the "#cp..." tag.


@dataclass(frozen=True)
class BackendOptions:
    """The backend's own keys, with their defaults (docs/sglang-connector.md lists them)."""

    endpoint: Optional[str] = None          # Socket path, unix:///path or host:port; None:
    #                                          the client's default ($KVSTRATA_SOCKET, ...).
    salt: str = ""                          # Tenant salt: different salts never share pages.
    model: Optional[str] = None             # Namespace model name; None: SGLang's model name.
    timeout_s: float = 2.0                  # Deadline of every daemon call.
    retry_interval_s: float = 1.0           # Daemon absent at start: retry opening this often.
    token_file: Optional[str] = None        # Bearer token file (TCP endpoints).
    tls_root_cert_file: Optional[str] = None  # PEM root certificate: TLS (TCP endpoints).
    client_name: str = "sglang-hicache"     # Session name shown by `kvstrata sessions`.
    heartbeat_timeout_ms: int = 0           # 0: the daemon's default deadline.
    fast_lookup: bool = True                # batch_exists over the lookup fast path socket.
    copy_threads: int = 4                   # Threads copying one batch's pages (1..64).
    load_planner: str = "auto"              # PLANNER_MODES


def _string(key: str, value: Any, *, allow_empty: bool, max_bytes: int = 4096) -> str:
    if not isinstance(value, str):
        raise ValueError(f"kvstrata extra-config: {key!r} must be a string, got "
                         f"{type(value).__name__}")
    if not allow_empty and not value:
        raise ValueError(f"kvstrata extra-config: {key!r} must not be empty")
    if len(value.encode("utf-8")) > max_bytes:
        raise ValueError(f"kvstrata extra-config: {key!r} is longer than {max_bytes} bytes")
    return value


def _number(key: str, value: Any, *, minimum: float, maximum: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"kvstrata extra-config: {key!r} must be a number, got "
                         f"{type(value).__name__}")
    v = float(value)
    if not math.isfinite(v) or not minimum <= v <= maximum:
        raise ValueError(f"kvstrata extra-config: {key!r} = {value!r} is outside "
                         f"[{minimum:g}, {maximum:g}]")
    return v


def parse_options(extra_config: Optional[Mapping[str, Any]]) -> BackendOptions:
    """BackendOptions from SGLang's extra_config dict (None = all defaults)."""
    if extra_config is None:
        return BackendOptions()
    if not isinstance(extra_config, Mapping):
        raise ValueError("kvstrata extra-config must be a JSON object, got "
                         f"{type(extra_config).__name__}")
    known = {f for f in BackendOptions.__dataclass_fields__}
    unknown = sorted(k for k in extra_config if k not in known and k not in SGLANG_KEYS)
    if unknown:
        raise ValueError(f"kvstrata extra-config: unknown key(s) {', '.join(map(repr, unknown))}; "
                         f"accepted: {', '.join(sorted(known))} (and SGLang's "
                         f"{', '.join(sorted(SGLANG_KEYS))})")
    c = extra_config
    kw: dict = {}
    for key in ("endpoint", "model", "token_file", "tls_root_cert_file"):
        if c.get(key) is not None:
            kw[key] = _string(key, c[key], allow_empty=False,
                              max_bytes=MAX_MODEL_BYTES if key == "model" else 4096)
    if "salt" in c and c["salt"] is not None:
        kw["salt"] = _string("salt", c["salt"], allow_empty=True, max_bytes=MAX_SALT_BYTES)
    if "client_name" in c:
        kw["client_name"] = _string("client_name", c["client_name"], allow_empty=False,
                                    max_bytes=256)
    if "timeout_s" in c:
        kw["timeout_s"] = _number("timeout_s", c["timeout_s"], minimum=0.01, maximum=600)
    if "retry_interval_s" in c:
        kw["retry_interval_s"] = _number("retry_interval_s", c["retry_interval_s"],
                                         minimum=0, maximum=3600)
    if "heartbeat_timeout_ms" in c:
        v = c["heartbeat_timeout_ms"]
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 3_600_000:
            raise ValueError("kvstrata extra-config: 'heartbeat_timeout_ms' must be an integer "
                             f"in [0, 3600000], got {v!r}")
        kw["heartbeat_timeout_ms"] = v
    if "copy_threads" in c:
        v = c["copy_threads"]
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 64:
            raise ValueError("kvstrata extra-config: 'copy_threads' must be an integer in "
                             f"[1, 64], got {v!r}")
        kw["copy_threads"] = v
    if "fast_lookup" in c:
        if not isinstance(c["fast_lookup"], bool):
            raise ValueError("kvstrata extra-config: 'fast_lookup' must be true or false, got "
                             f"{c['fast_lookup']!r}")
        kw["fast_lookup"] = c["fast_lookup"]
    if "load_planner" in c:
        if c["load_planner"] not in PLANNER_MODES:
            raise ValueError("kvstrata extra-config: 'load_planner' must be one of "
                             f"{', '.join(map(repr, PLANNER_MODES))}, got {c['load_planner']!r}")
        kw["load_planner"] = c["load_planner"]
    return BackendOptions(**kw)


def read_secret_file(key: str, path: Optional[str]) -> Optional[str]:
    """The stripped contents of a token file (ValueError naming the key when unreadable)."""
    if path is None:
        return None
    try:
        with open(path, "r", encoding="utf-8") as f:
            text = f.read().strip()
    except OSError as err:
        raise ValueError(f"kvstrata extra-config: cannot read {key} {path!r}: {err}") from None
    if not text:
        raise ValueError(f"kvstrata extra-config: {key} {path!r} is empty")
    return text



def open_link(options: BackendOptions) -> Any:
    """The backend's kvstrata.DaemonLink: one Session, fail-safe (kvstrata.link); a refused
    namespace spec or credentials raise (the operator must know)."""
    import logging

    import kvstrata

    backoff_max = max(0.05, min(2.0, options.retry_interval_s or 2.0))
    return kvstrata.DaemonLink(
        endpoint=options.endpoint, client_name=options.client_name, timeout=options.timeout_s,
        token=read_secret_file("token_file", options.token_file),
        tls_root_cert=options.tls_root_cert_file,
        heartbeat_timeout_ms=options.heartbeat_timeout_ms,
        retry_interval_s=options.retry_interval_s, reconnect_backoff=(0.05, backoff_max),
        fast_lookup=options.fast_lookup, raise_refused=True,
        log=logging.getLogger("kvstrata_sglang"),
        without="HiCache L3 reads miss and writes are skipped")
