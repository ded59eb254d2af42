"""Counters read from each replica's Prometheus /metrics, and the daemon's GetStats, before
and after a routing mode (their differences are the mode's).

vLLM 0.26's names (vllm/v1/metrics/loggers.py): `vllm:prefix_cache_queries` / `_hits` (its
own GPU prefix cache, in tokens), `vllm:external_prefix_cache_queries` / `_hits` (a KV
connector's hits), `vllm:prompt_tokens`, `vllm:generation_tokens`,
`vllm:num_preemptions`, plus the connectors' own: KVStrataConnector's
`vllm:kvstrata_<name>` (docs/vllm-connector.md) and any counter whose name says offload
(vLLM's OffloadingConnector). The client library exports counters with `_total`; both
spellings are summed under the name without it, over every label set.
"""
from __future__ import annotations

import urllib.error
import urllib.request
from typing import Dict, Iterator, List, Optional, Tuple

PREFIXES = ("vllm:prefix_cache_", "vllm:external_prefix_cache_", "vllm:prompt_tokens",
            "vllm:generation_tokens", "vllm:num_preemptions", "vllm:kvstrata_",
            "vllm:request_success")


def samples(text: str) -> Iterator[Tuple[str, float]]:
    """(metric name without labels, value) of each sample of a Prometheus text page."""
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name_labels, _, value = line.rpartition(" ")
        try:
            v = float(value)
        except ValueError:
            continue
        yield name_labels.split("{", 1)[0].strip(), v


def parse(text: str) -> Dict[str, float]:
    """The counters of a Prometheus text exposition that this benchmark reads, summed over
    their label sets, `_total` stripped (`_created` samples skipped)."""
    out: Dict[str, float] = {}
    for name, v in samples(text):
        if name.endswith("_created") or not (name.startswith(PREFIXES) or "offload" in name):
            continue
        if name.endswith(("_bucket", "_sum", "_count")):
            continue
        key = name[:-6] if name.endswith("_total") else name
        out[key] = out.get(key, 0.0) + v
    return out


def scrape(url: str, timeout_s: float = 10.0) -> Optional[Dict[str, float]]:
    """url/metrics parsed, or None if it cannot be read."""
    try:
        with urllib.request.urlopen(f"{url}/metrics", timeout=timeout_s) as resp:
            return parse(resp.read().decode(errors="replace"))
    except (urllib.error.URLError, OSError):
        return None


def delta(before: Optional[Dict[str, float]],
          after: Optional[Dict[str, float]]) -> Optional[Dict[str, float]]:
    """after - before per counter (a counter absent before counts from 0); None if either
    scrape failed. Gauges come out as differences too: read counters only."""
    if before is None or after is None:
        return None
    return {k: round(v - before.get(k, 0.0), 3) for k, v in sorted(after.items())}


def total(deltas: List[Optional[Dict[str, float]]]) -> Dict[str, float]:
    """The node's sum over its replicas' deltas (failed scrapes skipped)."""
    out: Dict[str, float] = {}
    for d in deltas:
        for k, v in (d or {}).items():
            out[k] = round(out.get(k, 0.0) + v, 3)
    return out


def daemon_counters(endpoint: str) -> Optional[Dict[str, float]]:
    """kvstratad's GetStats counters plus each tier's hits/misses/evictions/blocks, or None
    if the daemon does not answer."""
    import kvstrata  # noqa: PLC0415 - only the kvstrata role needs the client
    try:
        with kvstrata.Client(endpoint, timeout=5.0) as client:
            stats = client.get_stats()
    except kvstrata.KVStrataError:
        return None
    out = {c.name: float(c.value) for c in stats.counters}
    for t in stats.tiers:
        for f in ("hits", "misses", "evictions", "blocks", "used_bytes"):
            out[f"tier_{t.name}_{f}"] = float(getattr(t, f))
    return out
