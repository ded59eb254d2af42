"""The node benchmark's numbers: one routing mode's summary from its request records, and
the comparison of each (conversation, turn)'s output with a reference role's."""
from __future__ import annotations

import math
from typing import Any, Dict, List, Optional


def percentile(values: List[float], p: float) -> Optional[float]:
    """The p-th percentile (nearest rank: the smallest value with at least p % of the values
    at or below it); None for no values."""
    if not values:
        return None
    s = sorted(values)
    k = max(1, math.ceil(p / 100 * len(s)))
    return s[min(k, len(s)) - 1]


def ttft_ms(records: List[Dict[str, Any]]) -> Dict[str, Optional[float]]:
    """TTFT p50/p90/p99 in ms over the records that produced a first token."""
    v = [r["ttft_s"] for r in records if r.get("ttft_s") is not None]
    return {f"p{p}": None if (x := percentile(v, p)) is None else round(x * 1e3, 1)
            for p in (50, 90, 99)}


def summarize(run: Dict[str, Any]) -> Dict[str, Any]:
    """A routing mode's row: wall time, rates, TTFT of turn 1 and of later turns, the cached
    prompt tokens the server reported per request, and the requests per replica."""
    recs = run["requests"]
    ok = [r for r in recs if r.get("error") is None]
    wall = run["wall_s"]
    prompt = sum(r["prompt_tokens"] for r in ok)
    cached = sum(r.get("cached_tokens") or 0 for r in ok)
    later = [r for r in ok if r["turn"] >= 2]
    cached_later = sum(r.get("cached_tokens") or 0 for r in later)
    prompt_later = sum(r["prompt_tokens"] for r in later)
    lat = [r["latency_s"] for r in ok if r.get("latency_s") is not None]
    return {
        "wall_s": round(wall, 2),
        "requests": len(recs), "errors": len(recs) - len(ok),
        "req_per_s": round(len(ok) / wall, 3) if wall else None,
        "prompt_tokens": prompt,
        "prompt_tok_per_s": round(prompt / wall) if wall else None,
        "output_tokens": sum(len(r["token_ids"]) for r in ok),
        "ttft_turn1_ms": ttft_ms([r for r in ok if r["turn"] == 1]),
        "ttft_later_ms": ttft_ms(later),
        "latency_p50_ms": None if not lat else round(percentile(lat, 50) * 1e3, 1),
        "cached_tokens": cached,
        "cached_frac": round(cached / prompt, 4) if prompt else None,
        "cached_frac_later": round(cached_later / prompt_later, 4) if prompt_later else None,
        "sent_per_replica": run.get("sent_per_replica"),
    }


def compare(ref: List[Dict[str, Any]], other: List[Dict[str, Any]],
            logprob_tol: float) -> Dict[str, Any]:
    """Per (conversation, turn) both ran without error: token ids equal? first-token logprob
    within logprob_tol? A turn after a token mismatch has another prompt in each run (the
    answers differ); it is still compared and counted as such (`after_mismatch`)."""
    by_key = {(r["conv"], r["turn"]): r for r in ref if r.get("error") is None}
    compared = token_mm = lp_mm = after = 0
    max_dlp = 0.0
    diverged = set()
    examples: List[Dict[str, Any]] = []
    for r in sorted(other, key=lambda x: (x["conv"], x["turn"])):
        a = by_key.get((r["conv"], r["turn"]))
        if a is None or r.get("error") is not None:
            continue
        compared += 1
        if r["conv"] in diverged:
            after += 1
        same = a["token_ids"] == r["token_ids"]
        dlp = None
        if a.get("first_logprob") is not None and r.get("first_logprob") is not None:
            dlp = abs(a["first_logprob"] - r["first_logprob"])
            max_dlp = max(max_dlp, dlp)
        if not same:
            token_mm += 1
            diverged.add(r["conv"])
        if dlp is not None and dlp > logprob_tol:
            lp_mm += 1
        if (not same or (dlp is not None and dlp > logprob_tol)) and len(examples) < 3:
            examples.append({"conv": r["conv"], "turn": r["turn"], "ref": a["token_ids"][:8],
                             "got": r["token_ids"][:8], "dlogprob": dlp})
    return {"compared": compared, "token_mismatches": token_mm,
            "logprob_mismatches": lp_mm, "after_mismatch": after,
            "max_abs_dlogprob": round(max_dlp, 6), "examples": examples}
