"""The slow-disk bench's summary: one table row per disk rate, the target's verdict, the
load planner's decisions."""
from __future__ import annotations

import math
from typing import Any, Dict, List, Optional

PLAN = ("in_step", "async", "partial", "recompute")


def pct(values: List[float], p: float) -> Optional[float]:
    """Nearest rank (as bench/node/stats.py): the smallest value with >= p % at or below."""
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s), max(1, math.ceil(p / 100 * len(s)))) - 1]


def ttft(records: List[Dict[str, Any]]) -> Dict[str, Any]:
    v = [r["ttft_s"] * 1e3 for r in records if r.get("ttft_s") is not None]
    return {"n": len(v), **{f"p{p}": (round(pct(v, p), 1) if v else None) for p in (50, 90, 99)}}


def plan_counts(waves: List[Dict[str, Any]]) -> Dict[str, float]:
    out: Dict[str, float] = {}
    for w in waves:
        for k, v in (w.get("metrics") or {}).items():
            if k.startswith("vllm:kvstrata_plan_") or k.startswith("vllm:external_prefix_cache"):
                key = k.replace("vllm:kvstrata_plan_", "").replace("vllm:", "")
                out[key] = out.get(key, 0.0) + v
    return out


def row_figures(row: Dict[str, Any]) -> Dict[str, Any]:
    waves = row.get("waves") or []
    hit = [r for w in waves for r in w["hit"]]
    rec = [r for w in waves for r in w["recompute"]]
    later_hit = [r for w in waves[1:] for r in w["hit"]]
    later_rec = [r for w in waves[1:] for r in w["recompute"]]
    own = [r for w in waves for r in w.get("own_recompute") or []]
    prompt = sum(r.get("prompt_tokens") or 0 for r in hit)
    cached = sum(r.get("cached_tokens") or 0 for r in hit)
    return {"hit": ttft(hit), "recompute": ttft(rec), "hit_later": ttft(later_hit),
            "recompute_later": ttft(later_rec), "own": ttft(own), "cached_frac": round(cached / prompt, 3)
            if prompt else None, "errors": sum(1 for r in hit + rec + own if r.get("error")),
            "plan": plan_counts(waves)}


def verdict(h: Optional[float], r: Optional[float]) -> str:
    if h is None or r is None:
        return "n/a"
    return f"{'PASS' if h <= r else 'MISS'} ({h / r:.2f}x)"


def render(result: Dict[str, Any]) -> str:
    a = result.get("args", {})
    lines = [f"slow disk: {a.get('concurrency')} in flight, {a.get('waves')} waves per row, "
             f"prompts of {a.get('prompt_tokens')} tokens, load_planner={a.get('load_planner')}; "
             f"disk {result.get('disk', {}).get('dev')} (cgroup v{result.get('disk', {}).get('cgroup')})",
             "", "| rate | fio MB/s | dd MB/s | recompute p50/p90/p99 ms | hit p50/p90/p99 ms "
             "| target (hit p99 <= recompute p99) | waves 2+: recompute p99 / hit p99 | "
             "cached | plan in_step/async/partial/recompute | errors |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for rate, row in (result.get("rows") or {}).items():
        f = row_figures(row)
        h, r, hl, rl = f["hit"], f["recompute"], f["hit_later"], f["recompute_later"]
        plan = "/".join(str(int(f["plan"].get(k, 0))) for k in PLAN)
        lines.append(
            f"| {rate} | {row.get('fio', {}).get('MB_s')} | {row.get('dd', {}).get('MB_s')} | "
            f"{r['p50']} / {r['p90']} / {r['p99']} | {h['p50']} / {h['p90']} / {h['p99']} | "
            f"{verdict(h['p99'], r['p99'])} | {rl['p99']} / {hl['p99']} "
            f"{verdict(hl['p99'], rl['p99'])} | {f['cached_frac']} | {plan} | {f['errors']} |")
    lines.append("")
    for rate, row in (result.get("rows") or {}).items():
        o, h = row_figures(row)["own"], row_figures(row)["hit"]
        if o["n"]:
            how = "nothing stored" if a.get("own", "nostore") == "nostore" else "stored"
            lines.append(f"{rate}: the KVStrata replica's own recompute (fresh prompts, {how}) "
                         f"p50/p90/p99 {o['p50']} / {o['p90']} / {o['p99']} ms; hit p99 "
                         f"against it: {verdict(h['p99'], o['p99'])}")
    lines.append("")
    for rate, row in (result.get("rows") or {}).items():
        f = row_figures(row)
        cc = (row.get("daemon_stats_after") or {}).get("client_counters", {})
        lines.append(f"{rate}: cgroup {row.get('cgroup_rules')}; L2 read "
                     f"{(row.get('l2_read_bytes') or 0) / 1e6:.1f} MB during the waves; "
                     f"unloaded tokens {int(f['plan'].get('unloaded_tokens', 0))}; "
                     f"external hits {int(f['plan'].get('external_prefix_cache_hits', 0))} of "
                     f"{int(f['plan'].get('external_prefix_cache_queries', 0))} tokens; "
                     f"daemon client_counters {cc}")
        for w, wave in enumerate(row.get("waves") or []):
            hs = sorted(round((x.get("ttft_s") or 0) * 1e3) for x in wave["hit"])
            rs = sorted(round((x.get("ttft_s") or 0) * 1e3) for x in wave["recompute"])
            p = {k: int(v) for k, v in plan_counts([wave]).items() if v and k in PLAN}
            own = sorted(round((x.get("ttft_s") or 0) * 1e3)
                         for x in wave.get("own_recompute") or [])
            lines.append(f"  wave {w}: recompute ms {rs}; hit ms {hs}; own recompute ms {own}; "
                         f"plan {p}")
    return "\n".join(lines)
