"""The node benchmark's roles: what KV connector each replica of a role runs.

  none      no connector: vLLM's GPU prefix cache alone (the reference outputs)
  native    vLLM's OffloadingConnector, one CPU cache per replica (CPUOffloadingSpec,
            `cpu_bytes_to_use` each): a replica finds only what it offloaded itself
  kvstrata  KVStrataConnector, every replica on the node's one kvstratad (L1 = replicas x
            the per-replica host cache bytes, the same host memory as native's caches); its
            load planner decides per hit how much loads and whether in the step or before it
  kvstrata_inline  the same with the load planner off (load_planner="off"): every L1 hit
            loads in the step that uses it, as issue 41's first node runs did; the same
            daemon, its own namespace (salt "inline-role"), so it never finds kvstrata's
            blocks: the planner's A/B in one run
  kvstrata_async  the same with every hit loaded asynchronously (load_mode="async": before the
            request is scheduled, never in the step; the planner still prices recompute),
            its own namespace (salt "async-role"): the in-step / asynchronous A/B of a busy
            replica in one run
  lmcache   LMCache through bench/node/lmcache_role.py (written separately): offered only
            when that module is present and says AVAILABLE; otherwise a blocked row
"""
from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

HERE = Path(__file__).resolve().parent
ROLES = ("none", "native", "kvstrata", "kvstrata_inline", "kvstrata_async", "lmcache")


def uses_daemon(role: str) -> bool:
    """Whether the role's replicas use the node's kvstratad."""
    return role in ("kvstrata", "kvstrata_inline", "kvstrata_async")


def lmcache_module() -> Tuple[Optional[Any], str]:
    """(bench/node/lmcache_role.py imported, "") when it says AVAILABLE, else (None, why)."""
    if not (HERE / "lmcache_role.py").is_file():
        return None, "bench/node/lmcache_role.py is not there"
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    try:
        mod = importlib.import_module("lmcache_role")
    except Exception as err:  # noqa: BLE001 - any import failure is a blocked role
        return None, f"lmcache_role.py failed to import: {type(err).__name__}: {err}"
    if not getattr(mod, "AVAILABLE", False):
        return None, str(getattr(mod, "BLOCKED_REASON", "lmcache_role.AVAILABLE is false"))
    return mod, ""


def kv_transfer(role: str, replica: int, block_size: int, cpu_bytes: int,
                endpoint: Optional[str], lmcache: Optional[Any]) -> Optional[Dict[str, Any]]:
    """The --kv-transfer-config of one replica of a role (None: no connector)."""
    if role == "none":
        return None
    if role == "native":
        return {"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
                "kv_connector_extra_config": {"spec_name": "CPUOffloadingSpec",
                                              "cpu_bytes_to_use": cpu_bytes,
                                              "block_size": block_size}}
    if uses_daemon(role):
        extra: Dict[str, Any] = {"endpoint": endpoint}
        if role == "kvstrata_inline":
            extra.update(load_planner="off", namespace={"salt": "inline-role"})
        if role == "kvstrata_async":
            extra.update(load_mode="async", namespace={"salt": "async-role"})
        return {"kv_connector": "KVStrataConnector", "kv_connector_module_path": "kvstrata_vllm",
                "kv_role": "kv_both", "kv_load_failure_policy": "recompute",
                "kv_connector_extra_config": extra}
    if role == "lmcache":
        if lmcache is None:
            raise ValueError("role lmcache is not available")
        return lmcache.kv_transfer_config(replica)
    raise ValueError(f"unknown role {role!r}")


def kv_transfers(role: str, replicas: int, block_size: int, cpu_bytes: int,
                 endpoint: Optional[str], lmcache: Optional[Any]) -> List[Optional[Dict[str, Any]]]:
    return [kv_transfer(role, i, block_size, cpu_bytes, endpoint, lmcache)
            for i in range(replicas)]


def routing(mode: str) -> str:
    """A plan mode's routing: "sticky.2" (the second run of sticky routing) -> "sticky"."""
    return mode.split(".", 1)[0]


def expand_modes(text: str) -> List[str]:
    """"rr+sticky*3" -> ["rr", "sticky", "sticky.2", "sticky.3"]: MODE*N runs a routing mode
    N times on the same replicas, each run with conversations of its own (a seed per run)."""
    modes: List[str] = []
    for m in text.split("+"):
        base, star, count = m.partition("*")
        if star and (not count.isdigit() or not 1 <= int(count) <= 20):
            raise ValueError(f"mode {m!r}: write MODE*N with 1 <= N <= 20")
        modes += [base] + [f"{base}.{i}" for i in range(2, int(count or 1) + 1)]
    return modes


def parse_plan(text: str) -> List[Tuple[str, List[str]]]:
    """"none:rr,native:rr+sticky*2" -> [("none", ["rr"]), ("native", ["rr", "sticky",
    "sticky.2"])]; ValueError for an unknown role or mode, a role named twice, or a mode twice
    in a role."""
    from router import MODES  # noqa: PLC0415
    plan: List[Tuple[str, List[str]]] = []
    for item in (x.strip() for x in text.split(",") if x.strip()):
        role, sep, modes_text = item.partition(":")
        if not sep or not modes_text:
            raise ValueError(f"plan item {item!r}: write ROLE:MODE[+MODE...], e.g. native:rr+sticky")
        if role not in ROLES:
            raise ValueError(f"plan item {item!r}: unknown role {role!r} (one of {', '.join(ROLES)})")
        if role in (r for r, _ in plan):
            raise ValueError(f"plan: role {role!r} named twice")
        modes = expand_modes(modes_text)
        for m in modes:
            if routing(m) not in MODES:
                raise ValueError(f"plan item {item!r}: unknown routing mode {routing(m)!r} "
                                 f"(one of {', '.join(MODES)})")
        if len(set(modes)) != len(modes):
            raise ValueError(f"plan item {item!r}: a routing mode named twice")
        plan.append((role, modes))
    if not plan:
        raise ValueError("the plan is empty")
    return plan
