"""The node benchmark's summary.txt: one row per (role, routing mode), the outputs compared
with a reference role's, the counters behind the cached tokens, and the blocked roles."""
from __future__ import annotations

import statistics
from typing import Any, Dict, List, Optional, Tuple

from gauges import replica_lines
from stats import compare


def reference_of(results: Dict[str, Any], role: str, mode: str) -> Optional[str]:
    """The run whose outputs a (role, mode) is compared with: `none` in the same mode (the
    same conversations), else the first other role that ran that mode; None if none did."""
    if role == "none":
        return None
    if f"none:{mode}" in results:
        return f"none:{mode}"
    for key in results:
        r, m = key.split(":")
        if m == mode and r != role:
            return key
    return None


def comparisons(results: Dict[str, Any], tol: float) -> Dict[str, Tuple[str, Dict[str, Any]]]:
    """key -> (reference key, compare()) for every run that has a reference."""
    out = {}
    for key, res in results.items():
        role, mode = key.split(":")
        ref = reference_of(results, role, mode)
        if ref is not None and list(results).index(ref) < list(results).index(key):
            out[key] = (ref, compare(results[ref]["requests"], res["requests"], tol))
    return out


def median_of(values: List[Optional[float]]) -> Optional[float]:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def repeats(results: Dict[str, Any]) -> List[str]:
    """For each role and routing run more than once (MODE*N in the plan): the median over
    its runs of wall time, prompt tokens/s and later turns' TTFT p50/p90/p99, and the range
    of wall times -- what one run cannot tell at a busy node."""
    groups: Dict[str, List[Dict[str, Any]]] = {}
    for key, res in results.items():
        role, mode = key.split(":")
        groups.setdefault(f"{role}:{mode.split('.', 1)[0]}", []).append(res["summary"])
    lines = []
    for key, runs in groups.items():
        if len(runs) < 2:
            continue
        walls = [r["wall_s"] for r in runs]
        later = {p: median_of([r["ttft_later_ms"].get(p) for r in runs])
                 for p in ("p50", "p90", "p99")}
        lines.append(f"{key:<22}{len(runs):>5}{statistics.median(walls):>9.2f}"
                     f"{min(walls):>7.2f}-{max(walls):<7.2f}"
                     f"{statistics.median(r['prompt_tok_per_s'] for r in runs):>13.0f}"
                     f"{pct3(later):>25}")
    if not lines:
        return []
    head = (f"{'role:routing':<22}{'runs':>5}{'wall s':>9}{'min-max':>15}{'prompt tok/s':>13}"
            f"{'TTFT t>=2 p50/90/99':>25}")
    return ["", "Medians over the runs of a routing mode run more than once (MODE*N):",
            head, "-" * len(head)] + lines


def fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}"
    return str(v)


def pct3(d: Dict[str, Any]) -> str:
    return "/".join(fmt(d.get(p)) for p in ("p50", "p90", "p99"))


def render(spec: Dict[str, Any], results: Dict[str, Any], starts: Dict[str, float],
           blocked: Dict[str, str], left: List[str]) -> str:
    wl = spec["workload"]
    gpu_tokens = spec["gpu_blocks"] * spec["block_size"]
    lines = [
        f"Node benchmark: {spec['replicas']} vllm serve replicas ({'CPU smoke' if spec['smoke'] else 'one per GPU'}), "
        f"model {spec['model']} ({spec['dtype']}, dummy weights, "
        f"{'eager' if spec['enforce_eager'] else 'CUDA graphs'}), GPU KV {spec['gpu_blocks']} "
        f"blocks x {spec['block_size']} = {gpu_tokens} tokens per replica",
        f"workload per mode: {wl['conversations']} conversations x {wl['turns']} turns, shared "
        f"prefix {wl['prefix_tokens']} tokens ({wl['documents']} document(s)), user "
        f"{wl['first_user_tokens']} then {wl['user_tokens']} tokens, answers {wl['max_tokens']} "
        f"tokens, {spec['concurrency']} in flight; {spec['prompt_tokens_per_mode']} prompt "
        f"tokens, {spec['distinct_tokens_per_mode']} distinct context tokens "
        f"({spec['distinct_tokens_per_mode'] / gpu_tokens:.1f}x one replica's GPU KV)",
        f"host cache: {spec['cpu_bytes_per_replica'] / (1 << 30):.2f} GiB per replica (native), "
        f"kvstratad L1 {spec['l1_bytes'] / (1 << 30):.2f} GiB "
        f"for the node",
        "server starts (all replicas of a role at once): "
        + (", ".join(f"{r} {s} s" for r, s in starts.items()) or "-"),
        "",
    ]
    cmp = comparisons(results, spec["logprob_tol"])
    head = (f"{'role:mode':<18}{'wall s':>8}{'req/s':>8}{'prompt tok/s':>13}"
            f"{'TTFT t1 p50/90/99 ms':>24}{'TTFT t>=2 p50/90/99 ms':>25}{'cached':>8}"
            f"{'t>=2':>7}{'errors':>7}  per replica   outputs vs reference")
    lines += [head, "-" * len(head)]
    for key, res in results.items():
        s = res["summary"]
        ref = cmp.get(key)
        out = "(reference)" if ref is None else (
            f"{ref[1]['token_mismatches']}/{ref[1]['compared']} token, "
            f"{ref[1]['logprob_mismatches']} logprob mismatches vs {ref[0]} "
            f"(max |dlogprob| {ref[1]['max_abs_dlogprob']:.3g})")
        lines.append(f"{key:<18}{fmt(s['wall_s']):>8}{fmt(s['req_per_s']):>8}"
                     f"{fmt(s['prompt_tok_per_s']):>13}{pct3(s['ttft_turn1_ms']):>24}"
                     f"{pct3(s['ttft_later_ms']):>25}{fmt(s['cached_frac']):>8}"
                     f"{fmt(s['cached_frac_later']):>7}{s['errors']:>7}  "
                     f"{'/'.join(map(str, s['sent_per_replica'] or [])):<13} {out}")
    for role, why in blocked.items():
        if any(r == role for r, _ in spec["plan"]) or role == "lmcache":
            lines.append(f"{role + ':*':<18}{why}")
    lines += repeats(results)
    lines += replica_lines(results)
    lines += ["", "cached = prompt tokens the servers reported cached (usage.prompt_tokens_details: "
              "GPU prefix cache + connector hits) / prompt tokens; t>=2: the same over turns >= 2.",
              "", "Prometheus counters per mode, all replicas (tokens): GPU prefix-cache "
              "hits/queries, external (connector) hits/queries, preemptions, connector counters"]
    for key, res in results.items():
        m = res.get("metrics") or {}
        conn = {k.split(":", 1)[1]: v for k, v in m.items()
                if k.startswith("vllm:kvstrata_") or "offload" in k}
        lines.append(
            f"  {key:<16} prefix {fmt(m.get('vllm:prefix_cache_hits'))}/"
            f"{fmt(m.get('vllm:prefix_cache_queries'))}  external "
            f"{fmt(m.get('vllm:external_prefix_cache_hits'))}/"
            f"{fmt(m.get('vllm:external_prefix_cache_queries'))}  preemptions "
            f"{fmt(m.get('vllm:num_preemptions'))}"
            + (("  " + " ".join(f"{k}={fmt(v)}" for k, v in sorted(conn.items()))) if conn else ""))
        if res.get("daemon"):
            d = res["daemon"]
            keep = {k: v for k, v in d.items() if v and not k.endswith("used_bytes")}
            lines.append("    kvstratad: " + " ".join(f"{k}={fmt(v)}" for k, v in keep.items()))
        if not all(res.get("replicas_alive", [True])):
            lines.append(f"    replicas alive after the mode: {res['replicas_alive']}")
    if left:
        lines += ["", "not run yet (run again with --continue): " + ", ".join(left)]
    return "\n".join(lines)
