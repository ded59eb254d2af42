"""The report of bench/vllm_gpu/run.py: the roles, the comparison against the targets of the
vLLM GPU issue (report) and the tables of summary.txt (render)."""
from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any, Dict, List, Optional

from step_profile import render_profile

GIB = 1 << 30
ROLES = ("none", "native", "kvstrata_async", "kvstrata", "kvstrata_b")
# Roles run only when --roles names them, and the daemon settings each runs with on top of
# the run's (the daemon is restarted with them before the role, on an empty L1 and L2).
ROLE_DAEMON = {"kvstrata_batch": {"gpu.copy_strategy": "batch"}}
# Control roles (engine.py, noop_connector.py), run only when --roles names them.
CONTROL_ROLES = ("noop", "noop_link", "noop_reg")
ALL_ROLES = ROLES + tuple(ROLE_DAEMON) + CONTROL_ROLES
# The roles with single-request rows and users rounds (engine A and its variants).
ENGINE_A = ("none", "native", "kvstrata", "kvstrata_async", "kvstrata_batch")


def ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return round(a / b, 3) if a and b else None


def single_ms(results: Dict[str, Any], role: str, size: str) -> Optional[float]:
    row = results.get(role, {}).get("phases", {}).get("single", {}).get(size)
    return row["median_ms"] if row else None


def same_output(ref: Dict[str, Any], tokens: List[int], top5: List[List[float]],
                tol: float = 0.0) -> bool:
    """Same token ids, same top-5 ids and logprobs (within tol) as the reference."""
    if tokens != ref["tokens"]:
        return False
    if [t for t, _ in top5] != [t for t, _ in ref["top5"]]:
        return False
    return all(abs(a - b) <= tol for (_, a), (_, b) in zip(top5, ref["top5"]))


def report(results: Dict[str, Any], spec: Dict[str, Any]) -> Dict[str, Any]:
    sizes = [str(n) for n in spec["sizes"]]
    rep: Dict[str, Any] = {"ttft": [], "targets": [], "correctness": {}}
    b = results.get("kvstrata_b", {}).get("phases", {})
    l2 = b.get("l2_hit", {}).get("rows", {})
    for n in sizes:
        none, native, kvs, kva = (single_ms(results, r, n)
                                  for r in ("none", "native", "kvstrata", "kvstrata_async"))
        l2ms = l2.get(n, {}).get("median_ms")
        gpu_hit = results.get("kvstrata", {}).get("phases", {}).get("single", {}).get(n, {}).get(
            "gpu_hit_ms")
        rep["ttft"].append({"tokens": int(n), "recompute_ms": none, "native_hit_ms": native,
                            "kvstrata_l1_hit_ms": kvs, "kvstrata_l2_hit_ms": l2ms,
                            "kvstrata_async_l1_hit_ms": kva,
                            "l1_vs_native": ratio(kvs, native),
                            "async_l1_vs_native": ratio(kva, native),
                            "l1_speedup_vs_recompute": ratio(none, kvs),
                            "l2_speedup_vs_recompute": ratio(none, l2ms),
                            "gpu_cache_hit_ms": gpu_hit})

    def target(name: str, value: Any, ok: Optional[bool]) -> None:
        rep["targets"].append({"target": name, "value": value,
                               "verdict": "n/a" if ok is None else ("PASS" if ok else "MISS")})

    for row in rep["ttft"]:
        r = row["l1_vs_native"]
        target(f"L1 hit <= native hit at {row['tokens']} tokens", r, None if r is None else r <= 1.0)
        if row["tokens"] >= 8192:
            target(f"L1 hit <= 0.85 x native at {row['tokens']} tokens", r,
                   None if r is None else r <= 0.85)
    big = rep["ttft"][-1]
    if results.get("disk"):
        rep["disk"] = results["disk"]
    if big["kvstrata_l2_hit_ms"]:
        rep["l2_read"] = l2_read(l2.get(str(big["tokens"]), {}), big, results.get("disk"), spec)
    target(f"L2 hit >= 5x faster than recompute at {big['tokens']} tokens",
           big["l2_speedup_vs_recompute"],
           None if big["l2_speedup_vs_recompute"] is None else big["l2_speedup_vs_recompute"] >= 5)

    cross = b.get("cross_instance", {})
    fractions = {n: round(cross[n]["cached"] / int(n), 4) for n in sizes if n in cross}
    rep["cross_instance"] = {n: {**{k: cross[n][k] for k in ("ms", "cached", "prompt_tokens")},
                                 "hit_fraction": fractions[n]} for n in fractions}
    # The last block of a prompt is always computed (vLLM needs one token's logits).
    target("cross-instance: >= 95% of prefix tokens hit in engine B",
           min(fractions.values()) if fractions else None,
           None if not fractions else min(fractions.values()) >= 0.95)

    users = {r: results.get(r, {}).get("phases", {}).get("users", {}) for r in ENGINE_A
             if r in results}
    rep["users"] = {r: {rnd: {k: v for k, v in u.get(rnd, {}).items()
                              if k not in ("outputs", "first_top5")} for rnd in ("round1", "round2")}
                    for r, u in users.items()}
    tput = {r: users.get(r, {}).get("round2", {}).get("prompt_tok_per_s") for r in ENGINE_A}
    # With fewer users' prefix tokens than the GPU holds, round 2 hits the GPU prefix cache.
    beyond = spec["users"] * spec["user_tokens"] > spec["gpu_blocks"] * spec["block_size"]
    target("beyond-HBM throughput: KVStrata >= native", ratio(tput["kvstrata"], tput["native"]),
           None if not (beyond and tput["kvstrata"] and tput["native"])
           else tput["kvstrata"] >= tput["native"])
    t1 = {r: users.get(r, {}).get("round1", {}).get("wall_s") for r in ENGINE_A}
    # Round 1 (no reuse) of every role against none's: each run's wall time, the median.
    rep["round1"] = {r: {"runs_s": users[r]["round1"].get("wall_s_runs"),
                         "median_s": t1[r], "vs_none": ratio(t1[r], t1["none"]),
                         "prompt_tok_per_s": users[r]["round1"].get("prompt_tok_per_s")}
                     for r in ENGINE_A if users.get(r, {}).get("round1")}
    overhead = ratio(t1["kvstrata"], t1["none"])
    target("no-reuse overhead <= 2% (round-1 wall time KVStrata / none)", overhead,
           None if overhead is None else overhead <= 1.02)
    if "kvstrata_batch" in users:
        ob = ratio(t1["kvstrata_batch"], t1["none"])
        target("no-reuse overhead <= 2%, kvstrata_batch (daemon gpu.copy_strategy=batch)", ob,
               None if ob is None else ob <= 1.02)

    # Correctness: every KVStrata hit against the same prompt computed without KVStrata.
    none_single = results.get("none", {}).get("phases", {}).get("single", {})
    checked = mismatched = 0
    details = []

    def check(what: str, ref: Optional[Dict[str, Any]], tokens: List[int], top5: Any) -> None:
        nonlocal checked, mismatched
        if ref is None:
            return
        checked += 1
        if not same_output(ref, tokens, top5, tol=0.0):
            mismatched += 1
            details.append({"what": what, "ref": ref, "got": {"tokens": tokens, "top5": top5}})

    # vLLM's own offloading against the same reference: reported, no target (a hit of a
    # whole-block prompt computes its last token alone, as KVStrata's does).
    native_checked = native_mismatched = 0
    native_gap = 0.0
    for n in sizes:
        row = none_single.get(n)
        for role in [r for r in results if r.split(".")[0] == "native"]:
            nat = results.get(role, {}).get("phases", {}).get("single", {}).get(n)
            for t, p in zip(nat.get("tokens", []), nat.get("top5", [])) if nat and row else ():
                native_checked += 1
                if not same_output({"tokens": row["cold_tokens"], "top5": row["cold_top5"]}, t, p):
                    native_mismatched += 1
                    native_gap = max([native_gap] + [abs(a - b) for (_, a), (_, b) in
                                                     zip(p, row["cold_top5"])])
    rep["correctness_native"] = {"checked": native_checked, "mismatched": native_mismatched,
                                 "max_logprob_gap": native_gap}

    for n in sizes:
        row = none_single.get(n)
        ref = {"tokens": row["cold_tokens"], "top5": row["cold_top5"]} if row else None
        for role in [r for r in results if r.split(".")[0] in
                     ("kvstrata", "kvstrata_async", "kvstrata_batch")]:
            kv = results.get(role, {}).get("phases", {}).get("single", {}).get(n)
            if kv:
                for i, (t, p) in enumerate(zip(kv["tokens"], kv["top5"])):
                    check(f"{role} L1 hit {n} #{i}", ref, t, p)
        if n in cross:
            check(f"cross-instance {n}", ref, cross[n]["tokens"], cross[n]["top5"])
        if n in l2:
            for i, (t, p) in enumerate(zip(l2[n]["tokens"], l2[n]["top5"])):
                check(f"L2 hit {n} #{i}", ref, t, p)
    fault = b.get("fault", {})
    after = fault.get("after")
    if after:
        row = none_single.get(str(after["prompt_tokens"]))
        if row:
            check("after the daemon restart", {"tokens": row["cold_tokens"], "top5": row["cold_top5"]},
                  after["tokens"], after["top5"])
    rep["correctness"] = {"checked": checked, "mismatched": mismatched, "details": details[:6]}
    registrations(results, rep, target)
    target("0 token-id / first-token logprob mismatches with and without KVStrata",
           f"{mismatched} of {checked}", None if not checked else mismatched == 0)
    # Batched users (different batch compositions): token ids only, reported, no target.
    ru = users.get("kvstrata", {}).get("round2", {}).get("outputs")
    rn = users.get("none", {}).get("round2", {}).get("outputs")
    if ru and rn:
        rep["users_round2_token_mismatches"] = sum(a != b for a, b in zip(ru, rn))
    rep["fault"] = {k: v for k, v in fault.items() if k not in ("tokens", "top5")}
    if "after" in rep["fault"]:
        rep["fault"]["after"] = {k: v for k, v in after.items() if k not in ("tokens", "top5")}
    target("daemon killed during a load: request completes, hits resume after restart",
           fault.get("after", {}).get("cached") if fault else None,
           None if not fault else bool(fault.get("completed") and after and after["cached"] > 0))
    if spec.get("tp", 1) > 1:
        load_bandwidth(results, spec, rep)
        one_rank_miss(results, rep, target)
    return rep


def l2_read(row: Dict[str, Any], big: Dict[str, Any], disk: Optional[Dict[str, Any]],
            spec: Dict[str, Any]) -> Dict[str, Any]:
    """The largest size's L2 hits against the disk: the hit's bytes over its TTFT, the
    daemon's L2 read rate (ListTiers read_bytes during the request over the connector's
    load_submit -> load_done, per run, median), the raw disk (disk_probe.py), and the read
    rate the 5x target needs / the speedup the disk's best raw read allows."""
    per_token = kv_bytes_per_token(spec) or 131072  # Llama-3.1-8B bf16: 128 KiB a token
    cached = [c for c in row.get("cached", []) if c] or [big["tokens"] - spec["block_size"]]
    nbytes = statistics.median(cached) * per_token
    out: Dict[str, Any] = {"bytes": int(nbytes),
                           "effective_gbps": round(nbytes / 1e9 / (big["kvstrata_l2_hit_ms"] / 1e3), 2)}
    daemon = []
    for tl, rb in zip(row.get("timelines", []), row.get("l2_read_bytes", [])):
        sub = next((e["at_ms"] for e in tl if e["ev"] == "load_submit"), None)
        done = next((e["at_ms"] for e in tl if e["ev"] == "load_done"), None)
        if sub is not None and done is not None and done > sub:
            daemon.append({"load_ms": round(done - sub, 1), "l2_read_bytes": rb,
                           "gbps": round(rb / 1e9 / ((done - sub) / 1e3), 2) if rb else None})
    out["daemon_runs"] = daemon
    rates = [d["gbps"] for d in daemon if d["gbps"]]
    out["daemon_l2_gbps"] = round(statistics.median(rates), 2) if rates else None
    if big["recompute_ms"]:
        out["needed_gbps_for_5x"] = round(nbytes / 1e9 / (big["recompute_ms"] / 5e3), 1)
    if disk:
        best = disk.get("best_read_gbps")
        if best:
            out["l2_vs_best_raw"] = ratio(out["daemon_l2_gbps"], best)
            out["hit_ms_at_best_raw"] = round(nbytes / 1e9 / best * 1e3, 1)
            out["speedup_bound_at_best_raw"] = ratio(big["recompute_ms"], out["hit_ms_at_best_raw"])
    return out


def kv_bytes_per_token(spec: Dict[str, Any]) -> Optional[int]:
    """KV cache bytes of one token on one TP rank: K and V of every layer, the rank's share
    of the KV heads, from the model's config.json (Llama-3.1-8B bf16, TP 2: 64 KiB); for
    MLA (kv_lora_rank in the config) the latent and rope parts of every layer, the same on
    every rank (DeepSeek-V2-Lite bf16: 1,152 bytes a layer)."""
    dtype_bytes = {"float32": 4, "float": 4}.get(str(spec["dtype"]), 2)  # bf16 / fp16
    if str(spec.get("kv_cache_dtype", "auto")).startswith("fp8"):
        dtype_bytes = 1
    try:
        cfg = json.loads((Path(spec["model"]) / "config.json").read_text())
        layers = int(cfg["num_hidden_layers"])
        if cfg.get("kv_lora_rank"):
            return layers * (int(cfg["kv_lora_rank"]) + int(cfg["qk_rope_head_dim"])) * \
                dtype_bytes
        heads = int(cfg.get("num_key_value_heads") or cfg["num_attention_heads"])
        head_dim = int(cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return 2 * layers * max(1, heads // spec.get("tp", 1)) * head_dim * dtype_bytes


def load_bandwidth(results: Dict[str, Any], spec: Dict[str, Any], rep: Dict[str, Any]) -> None:
    """Each rank's load bandwidth in the kvstrata role's L1 hit timelines (the last repeat
    of each size): its KV bytes / (load_done - load_submit, the worker's events; the submit
    event is logged when the submit call returns), against its device's copy ceiling (rank r
    runs on GPU r); and whether the ranks' loads overlapped in time."""
    ceiling = results.get("ceiling") or {}
    rep["copy_ceiling"] = ceiling
    devices = {d["device"]: d for d in ceiling.get("devices", [])}
    kvs = results.get("kvstrata", {})
    per_token = kv_bytes_per_token(spec)
    rep["kv_bytes_per_token_per_rank"] = per_token
    rank_of = {x["pid"]: int(str(x["client"]).rsplit("tp", 1)[1])
               for x in kvs.get("daemon_sessions", [])
               if str(x["client"]).startswith("vllm-worker-tp")}
    out: Dict[str, Any] = {}
    for n, row in kvs.get("phases", {}).get("single", {}).items():
        tokens = row["cached"][-1] or 0
        spans: Dict[int, Dict[str, float]] = {}
        for e in row.get("timeline", []):
            if e["ev"] == "load_submit" and e["pid"] not in spans:
                spans[e["pid"]] = {"submit": e["at_ms"], "submit_call_ms": e.get("ms", 0.0)}
            elif e["ev"] == "load_done" and "done" not in spans.get(e["pid"], {"done": 0}):
                spans[e["pid"]].update(done=e["at_ms"], failed=e.get("failed", 0))
        ranks = []
        for pid, sp in sorted(spans.items(), key=lambda x: (rank_of.get(x[0], 1 << 30), x[0])):
            if "done" not in sp:
                continue
            rank = rank_of.get(pid)
            ms = sp["done"] - sp["submit"]
            nbytes = tokens * per_token if per_token else None
            rate = round(nbytes / 1e9 / (ms / 1e3), 2) if nbytes and ms > 0 else None
            dev = devices.get(rank, {})
            ranks.append({"rank": rank, "pid": pid, "tokens": tokens, "bytes": nbytes,
                          "submit_ms": sp["submit"], "done_ms": sp["done"],
                          "load_ms": round(ms, 2), "failed": sp["failed"], "gbps": rate,
                          "pct_of_concurrent_ceiling": round(100 * rate / dev["concurrent_gbps"], 1)
                          if rate and dev.get("concurrent_gbps") else None,
                          "pct_of_alone_ceiling": round(100 * rate / dev["alone_gbps"], 1)
                          if rate and dev.get("alone_gbps") else None})
        overlap = None
        if len(ranks) > 1:  # > 0: every rank's load was in flight at once for that long
            overlap = round(min(r["done_ms"] for r in ranks)
                            - max(r["submit_ms"] for r in ranks), 2)
        out[n] = {"ranks": ranks, "overlap_ms": overlap,
                  "overlapped": None if overlap is None else overlap > 0,
                  "aggregate_gbps": None}
        span = (max(r["done_ms"] for r in ranks) - min(r["submit_ms"] for r in ranks)
                if ranks else 0)
        if per_token and span > 0:  # every rank's bytes over the first submit -> last done
            out[n]["aggregate_gbps"] = round(sum(r["bytes"] for r in ranks) / 1e9 / (span / 1e3), 2)
    rep["load_bandwidth"] = out


def one_rank_miss(results: Dict[str, Any], rep: Dict[str, Any], target) -> None:
    """kvstrata_b's last phase: a prompt both ranks held (the control hit), then tp_rank 1's
    namespace cleared: the prompt must be a miss on every rank (no KVStrata tokens, no load
    submitted by any rank) and recompute the output of the `none` role (or of its own first,
    cold run)."""
    row = results.get("kvstrata_b", {}).get("phases", {}).get("one_rank_miss")
    ref = results.get("none", {}).get("phases", {}).get("one_rank_miss_ref")
    if not row or "miss" not in row:
        target("a unit one rank lacks is a miss on every rank (no one-rank load)",
               (row or {}).get("error"), None)
        return
    miss, first = row["miss"], row["first"]
    ref_name = "none" if ref else "its first run"
    ref = ref or first
    same = same_output(ref, miss["tokens"], miss["top5"], tol=0.0)
    premise = bool(row["control"]["cached"] and row["cleared"])  # both held it, one lost it
    rep["one_rank_miss"] = {
        "prompt_tokens": row["prompt_tokens"], "first_cached": first["cached"],
        "control_cached": row["control"]["cached"],
        "control_load_submits": row["control"]["load_submits"],
        "namespace_blocks_before": row["blocks_before"], "namespace_blocks_after": row["blocks_after"],
        "cleared": row["cleared"], "miss_cached": miss["cached"],
        "miss_load_submits": miss["load_submits"], "miss_lookup_units": miss["lookup_units"],
        "miss_ms": miss["ms"], "output_reference": ref_name, "output_same": same,
        "first_same_as_none": same_output(ref, first["tokens"], first["top5"]) if ref_name == "none"
        else None}
    target("a unit one rank lacks is a miss on every rank (no one-rank load)",
           f"cached {miss['cached']}, load_submit {miss['load_submits']}, output "
           f"{'same as' if same else 'differs from'} {ref_name}"
           + ("" if premise else " (no control hit or rank 1 not cleared: not tested)"),
           None if not premise else (miss["cached"] == 0 and miss["load_submits"] == 0 and same))


def registrations(results: Dict[str, Any], rep: Dict[str, Any], target) -> None:
    """KVStrata engines: how many TP ranks had a worker session with a CUDA KV cache
    registration at the daemon (ListSessions, after the engine's start)."""
    rep["registrations"] = {}
    for role in ("kvstrata", "kvstrata_b"):
        r = results.get(role, {})
        if "ranks_registered" not in r:
            continue
        tp = r.get("tp", 1)
        rep["registrations"][role] = {"tp": tp, "ranks_registered": r["ranks_registered"],
                                      "sessions": r.get("daemon_sessions", [])}
        target(f"{role}: every TP rank's KV cache registered with the daemon",
               f"{r['ranks_registered']} of {tp}", r["ranks_registered"] >= tp)


def header(spec: Dict[str, Any]) -> str:
    return (f"vLLM GPU benchmark: tensor parallel {spec.get('tp', 1)}, "
            f"{spec['gpu_blocks']} GPU KV blocks of {spec['block_size']} tokens per rank, "
            f"prompt sizes {','.join(str(n) for n in spec['sizes'])}, {spec['users']} users")


def calibration_lines(calib: Dict[str, Any], slow: float = 1.3) -> List[str]:
    """Each engine's CPU calibration (cpu_probe.calibrate in its front-end process after the
    start): an engine whose on-CPU time is over `slow` x the engines' median ran on a slow or
    shared core, and is flagged so its rows are not compared as they stand."""
    got = {r: c for r, c in calib.items() if c and c.get("cpu_ms")}
    if not got:
        return []
    median = statistics.median(c["cpu_ms"] for c in got.values())
    out = ["CPU calibration (one pure-Python loop in each engine's process, best of 5): " +
           ", ".join(f"{r} {c['cpu_ms']} ms on CPU {c.get('cpu')}" for r, c in got.items())]
    for r, c in got.items():
        if c["cpu_ms"] > slow * median:
            out.append(f"  SLOW CORE: {r}'s process ran the loop in {c['cpu_ms'] / median:.2f}x "
                       f"the median ({median} ms); its timings are not comparable: run it again")
    return out


def render(rep: Dict[str, Any], results: Dict[str, Any], spec: Dict[str, Any]) -> str:
    lines = [header(spec), "",
             "Single-request TTFT (wall time of generate(max_tokens=1), median of repeats, ms)",
             f"{'tokens':>7} {'recompute':>10} {'native':>8} {'KVS L1':>8} {'KVS L2':>8} "
             f"{'L1/native':>10} {'L1 speedup':>11} {'L2 speedup':>11} {'GPU hit':>8} "
             f"{'async L1':>9} {'async/nat':>10}"]
    for r in rep["ttft"]:
        def f(v, w=8):
            return f"{v:>{w}.1f}" if isinstance(v, (int, float)) else f"{'-':>{w}}"
        lines.append(f"{r['tokens']:>7} {f(r['recompute_ms'], 10)} {f(r['native_hit_ms'])} "
                     f"{f(r['kvstrata_l1_hit_ms'])} {f(r['kvstrata_l2_hit_ms'])} "
                     f"{f(r['l1_vs_native'], 10)} {f(r['l1_speedup_vs_recompute'], 11)} "
                     f"{f(r['l2_speedup_vs_recompute'], 11)} {f(r['gpu_cache_hit_ms'])} "
                     f"{f(r['kvstrata_async_l1_hit_ms'], 9)} {f(r['async_l1_vs_native'], 10)}")
    render_l2(rep, lines)
    lines.append("")
    lines.append("Cross-instance (engine B, fresh process): " + ", ".join(
        f"{n}: {c['cached']}/{c['prompt_tokens']} tokens hit, {c['ms']} ms"
        for n, c in rep.get("cross_instance", {}).items()))
    lines.append("")
    lines.append("Users (round 1: unique prompts; round 2: same prefixes, beyond the GPU KV budget)")
    for role, rounds in rep.get("users", {}).items():
        for rnd, u in rounds.items():
            if u:
                runs = u.get("wall_s_runs") or []
                lines.append(f"  {role:9} {rnd}: {u.get('wall_s')} s"
                             + (f" (median of {runs})" if len(runs) > 1 else "")
                             + f", {u.get('prompt_tok_per_s')} prompt tok/s, TTFT p50 "
                             f"{u.get('ttft_p50_ms')} ms p90 {u.get('ttft_p90_ms')} ms (last run), "
                             f"cached {u.get('cached_tokens')}")
    if rep.get("round1"):
        lines.append("  Round 1 (no reuse), wall time of each run and the median, against none:")
        for role, r in rep["round1"].items():
            extra = ROLE_DAEMON.get(role)
            lines.append(f"    {role:15} runs {r['runs_s']} s, median {r['median_s']} s, "
                         f"{r['prompt_tok_per_s']} prompt tok/s, / none {r['vs_none']}"
                         + (f" (daemon {extra})" if extra else ""))
    if "users_round2_token_mismatches" in rep:
        lines.append(f"  round-2 outputs differing KVStrata vs none (batched, bf16): "
                     f"{rep['users_round2_token_mismatches']}")
    lines.append("")
    lines.append("KVStrata L1 hit timelines (ms from generate(); the connector's trace)")
    for n, row in results.get("kvstrata", {}).get("phases", {}).get("single", {}).items():
        lines.append(f"  {n:>6}: " + ", ".join(
            f"{e['ev']}@{e['at_ms']}" + (f"({e['ms']})" if "ms" in e else "")
            for e in row.get("timeline", [])) + f" | end@{row['runs_ms'][-1]}")
    lines.append("")
    lines.append("Stages, median over the repeats (ms from generate(); first occurrence; "
                 "gpu: ms between CUDA events)")
    for role in ("kvstrata", "kvstrata_async", "kvstrata_batch"):
        for n, row in results.get(role, {}).get("phases", {}).get("single", {}).items():
            lines.append(f"  {role} {n:>6}: " + stage_medians(row.get("timelines") or [row.get("timeline", [])]))
            if row.get("gpu_hit_timeline"):
                lines.append(f"  {role} {n:>6} GPU hit: " + stage_medians([row["gpu_hit_timeline"]]))
    render_tp(rep, lines)
    lines.append("")
    lines.append(f"Fault: {json.dumps(without_steps(rep.get('fault')))}")
    if "one_rank_miss" in rep:
        m = rep["one_rank_miss"]
        lines.append(
            f"One rank misses ({m['prompt_tokens']} tokens, kvstrata_b): first run cached "
            f"{m['first_cached']}; control hit cached {m['control_cached']} with "
            f"{m['control_load_submits']} load_submit; tp_rank 1's namespace cleared "
            f"(blocks by rank before {m['namespace_blocks_before']}, after "
            f"{m['namespace_blocks_after']}); then cached {m['miss_cached']}, lookup units "
            f"{m['miss_lookup_units']}, load_submit {m['miss_load_submits']}, {m['miss_ms']} ms, "
            f"output {'same as' if m['output_same'] else 'DIFFERS from'} {m['output_reference']}")
    lines.append(f"Correctness: {rep['correctness']['mismatched']} mismatches of "
                 f"{rep['correctness']['checked']} checked")
    for d in rep["correctness"]["details"]:
        lines.append(f"  mismatch {d['what']}: got {d['got']['tokens'][:4]} {d['got']['top5'][:2]}"
                     f" ref {d['ref']['tokens'][:4]} {d['ref']['top5'][:2]}")
    nat = rep.get("correctness_native", {})
    if nat.get("checked"):
        lines.append(f"vLLM native offload hits against the same reference (no target): "
                     f"{nat['mismatched']} mismatches of {nat['checked']}, largest top-5 "
                     f"logprob gap {nat['max_logprob_gap']}")
    for role, reg in rep.get("registrations", {}).items():
        lines.append(f"Daemon sessions of {role}: {reg['ranks_registered']} of {reg['tp']} ranks "
                     "registered; " + ", ".join(
                         f"{x['client']} ns {x['namespaces']} reg {x['registrations']}"
                         for x in reg["sessions"]))
    lines.append("")
    engines = [r for r in results if isinstance(results[r], dict) and r.split(".")[0] in ALL_ROLES]
    lines.append("Engines: " + ", ".join(
        f"{r} rc={results.get(r, {}).get('rc')} start {results.get(r, {}).get('engine_start_s')} s "
        f"total {results.get(r, {}).get('seconds')} s" for r in engines))
    lines += calibration_lines({r: results[r].get("cpu_calibration") for r in engines})
    lines.append("")
    lines.append("Targets")
    for t in rep["targets"]:
        lines.append(f"  {t['verdict']:4} {t['target']}: {t['value']}")
    lines += render_profile(results)
    return "\n".join(lines)


def render_l2(rep: Dict[str, Any], lines: List[str]) -> None:
    """The L2-hit row against the disk: the daemon's L2 read rate and the raw disk's."""
    r, d = rep.get("l2_read"), rep.get("disk")
    if not r and not d:
        return
    lines.append("")
    if r:
        lines.append(f"L2 hit of the largest size ({r['bytes'] / GIB:.2f} GiB): {r['effective_gbps']} "
                     f"GB/s over the TTFT; the daemon read L2 at {r['daemon_l2_gbps']} GB/s "
                     "(read_bytes / load_submit -> load_done, median; runs: " + ", ".join(
                         f"{x['gbps']} GB/s in {x['load_ms']} ms" for x in r["daemon_runs"])
                     + f"); 5x recompute needs {r.get('needed_gbps_for_5x')} GB/s")
    if d:
        lines.append("Raw disk under L2 (O_DIRECT, GB/s): " + ", ".join(
            f"{k[:-5]} {v}" for k, v in d.items() if k.endswith("_gbps"))
            + f"; {json.dumps(d.get('filesystem'))}" + (f"; error {d['error']}" if "error" in d else ""))
        if r and r.get("hit_ms_at_best_raw"):
            lines.append(f"  daemon L2 / best raw read: {r.get('l2_vs_best_raw')}; the hit's bytes "
                         f"at the best raw read take {r.get('hit_ms_at_best_raw')} ms: at most "
                         f"{r.get('speedup_bound_at_best_raw')}x recompute on this disk")


def render_tp(rep: Dict[str, Any], lines: List[str]) -> None:
    """TP > 1: the copy ceilings and each rank's L1 load bandwidth against its device's."""
    c = rep.get("copy_ceiling")
    if c is None:
        return
    lines.append("")
    if not c.get("devices"):
        lines.append(f"Host-to-device copy ceilings: {c.get('error', 'not measured')}")
    else:
        lines.append(f"Host-to-device copy ceilings ({c['bytes'] / GIB:g} GiB pinned -> device, "
                     f"median of {c['repeats']}, GB/s): " + ", ".join(
                         f"GPU{d['device']} alone {d['alone_gbps']} concurrent "
                         f"{d['concurrent_gbps']}" for d in c["devices"])
                     + f"; all at once {c['concurrent_aggregate_gbps']} aggregate")
    lines.append(f"KVStrata L1 hit load bandwidth per rank ({rep.get('kv_bytes_per_token_per_rank')}"
                 " KV bytes per token per rank; load_submit -> load_done)")
    lines.append(f"  {'tokens':>6} {'rank':>4} {'pid':>7} {'MB':>8} {'load ms':>8} {'GB/s':>7} "
                 f"{'% conc':>7} {'% alone':>8}  overlap")
    for n, row in rep.get("load_bandwidth", {}).items():
        for r in row["ranks"]:
            def f(v, w):
                return f"{v:>{w}}" if v is not None else f"{'-':>{w}}"
            lines.append(f"  {n:>6} {f(r['rank'], 4)} {r['pid']:>7} "
                         f"{f(round(r['bytes'] / 1e6, 1) if r['bytes'] else None, 8)} "
                         f"{r['load_ms']:>8} {f(r['gbps'], 7)} "
                         f"{f(r['pct_of_concurrent_ceiling'], 7)} {f(r['pct_of_alone_ceiling'], 8)}"
                         + (f"  {'yes' if row['overlapped'] else 'no'} ({row['overlap_ms']} ms),"
                            f" aggregate {row['aggregate_gbps']} GB/s" if r is row["ranks"][0]
                            and row["overlap_ms"] is not None else ""))


def without_steps(value: Any) -> Any:
    """`value` without the trace's per-step events (step_*, hooks), for a short summary."""
    if isinstance(value, dict):
        return {k: without_steps(v) for k, v in value.items()}
    if isinstance(value, list):
        return [without_steps(v) for v in value
                if not (isinstance(v, dict) and str(v.get("ev", "")).startswith(("step_", "hooks", "sched")))]
    return value


def stage_medians(timelines: List[List[Dict[str, Any]]]) -> str:
    """Each event's first at_ms (and each gpu field), median over the timelines."""
    at: Dict[str, List[float]] = {}
    for tl in timelines:
        seen = set()
        for e in tl:
            if e["ev"] == "gpu":
                for k, v in e.items():
                    if k not in ("ev", "req", "at_ms", "pid"):
                        at.setdefault(f"gpu.{k}", []).append(v)
            elif e["ev"] not in seen:
                seen.add(e["ev"])
                at.setdefault(e["ev"], []).append(e["at_ms"])
    return ", ".join(f"{k}@{statistics.median(v):.2f}" for k, v in
                     sorted(at.items(), key=lambda kv: (kv[0].startswith("gpu."),
                                                        statistics.median(kv[1]))))
