#!/usr/bin/env python3
"""Real SGLang engines on a GPU: KVStrata as HiCache's L3 beside SGLang's own file backend.

    python3 bench/sglang_gpu/run.py --out DIR [--roles ...] [--continue]
                                                    # (scripts/gpu_sglang.sh runs it)

Starts one kvstratad (L1 only: the L3 of this run is the daemon's shared memory), then one
engine process per role (engine.py; each the same dummy Llama-3.1-8B, bf16, page 64, Triton
attention, CUDA graphs on, the same GPU KV budget and host pool): `none` (HiCache without
L3), `file` (SGLang's HiCacheFile on local disk), `kvstrata` (kvstrata_sglang), then
`file_b` and `kvstrata_b` (a second, fresh engine on the same storage: cross-process hits;
kvstrata_b also SIGKILLs the daemon while requests run). Writes DIR/sglang_gpu.json
(everything), DIR/summary.txt (the tables against the SGLang GPU issue's targets),
DIR/run.log and DIR/kvstratad.log.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Dict, List

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE.parent / "vllm_gpu"))

from role_process import run_benchmark  # noqa: E402

ROLES = ("none", "file", "kvstrata", "file_b", "kvstrata_b", "kvstrata_t4")
FIRST_ENGINES = ("none", "file", "kvstrata", "kvstrata_t4")   # single + users phases
STORAGE_ROLES = ("file", "kvstrata", "file_b", "kvstrata_b", "kvstrata_t4")


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--workdir", default="/tmp/kvs-sglang-bench")
    ap.add_argument("--roles", default=",".join(ROLES))
    ap.add_argument("--continue", dest="cont", action="store_true",
                    help="keep the workdir (its spec, L3 contents and earlier roles' results)")
    ap.add_argument("--model", default=str(REPO / "bench" / "vllm_gpu" / "model"))
    ap.add_argument("--sizes", default="8192,32768")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--users", type=int, default=16)
    ap.add_argument("--user-tokens", type=int, default=8192)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--gpu-tokens", type=int, default=49152,
                    help="the GPU KV pool (max_total_tokens); the host pool is 2x that")
    ap.add_argument("--daemon", default=str(REPO / ".bundle" / "bin" / "kvstratad"))
    ap.add_argument("--daemon-set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--role-timeout", type=float, default=300.0)
    ap.add_argument("--no-fault", action="store_true")
    ap.add_argument("--keep-daemon", action="store_true",
                    help="leave kvstratad running (its own process session) for a --continue call")
    return ap.parse_args()


def make_spec(args: argparse.Namespace, workdir: Path) -> Dict[str, Any]:
    config = json.loads((Path(args.model) / "config.json").read_text())
    gpu_tokens = args.gpu_tokens
    kv_bytes_per_token = (2 * config["num_hidden_layers"] * config["num_key_value_heads"] *
                          (config["hidden_size"] // config["num_attention_heads"]) * 2)
    return {
        "model": args.model, "vocab": config["vocab_size"], "workdir": str(workdir),
        "sizes": [int(x) for x in args.sizes.split(",")], "repeats": args.repeats,
        "page_size": 64, "chunked_prefill": 8192, "context_length": 65536,
        "gpu_tokens": gpu_tokens,
        # Host pool = 2 x the GPU pool (HiCache's default ratio), given in GB.
        "host_gib": round(2 * gpu_tokens * kv_bytes_per_token / 1e9, 2),
        "kv_bytes_per_token": kv_bytes_per_token,
        "users": args.users, "user_tokens": args.user_tokens, "question_tokens": 64,
        "concurrency": args.concurrency, "fault": not args.no_fault,
        "daemon": {"binary": args.daemon, "workdir": str(workdir / "daemon"),
                   # L1 only: the default configuration's L2 (~/.cache/kvstrata/l2)
                   # would outlive the run on a warm machine and serve the next run's
                   # "cold" requests (it did in run 4, bench/results/sglang-h100-run4/NOTES.md).
                   "settings": {"l1.capacity": "40GiB", "l1.slab_size": "64MiB",
                                "l2.enabled": "false",
                                "sessions.heartbeat_timeout_ms": "10000",
                                **dict(kv.split("=", 1) for kv in args.daemon_set)}},
    }


# ---------------------------------------------------------------------- report

def _get(d: Dict[str, Any], *path: Any) -> Any:
    for k in path:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


def report(results: Dict[str, Any], spec: Dict[str, Any]) -> Dict[str, Any]:
    rep: Dict[str, Any] = {"single": {}, "cross": {}, "users": {}, "correctness": {},
                           "targets": {}}
    ph = {r: results.get(r, {}).get("phases", {}) for r in ROLES}
    for size in spec["sizes"]:
        row: Dict[str, Any] = {}
        for role in FIRST_ENGINES:
            s = ph[role].get(f"single_{size}")
            if not s:
                continue
            row[role] = {"cold_ms": s["cold"]["ms"], "gpu_hit_ms": s["gpu_hit"]["ms"],
                         "after_flush_ms": s["after_flush_ms_median"],
                         "storage_tokens": [(h["details"] or {}).get("storage")
                                            for h in s["after_flush"]],
                         "stored": s.get("stored")}
        k, f = _get(row, "kvstrata", "after_flush_ms"), _get(row, "file", "after_flush_ms")
        row["kvstrata_vs_file"] = round(k / f, 3) if k and f else None
        rep["single"][size] = row
        rep["targets"][f"L3 hit {size}: kvstrata <= 0.8 x file"] = (
            None if row["kvstrata_vs_file"] is None else row["kvstrata_vs_file"] <= 0.8)
    for role in ("file_b", "kvstrata_b"):
        for size in spec["sizes"]:
            c = ph[role].get(f"cross_{size}")
            if not c:
                continue
            stored = (size // spec["page_size"]) * spec["page_size"]
            got = (c["first"]["details"] or {}).get("storage") or 0
            rep["cross"].setdefault(role, {})[size] = {
                "ms": c["first"]["ms"], "storage_tokens": got,
                "share": round(got / stored, 4), "second_ms": c["second"]["ms"]}
            if role == "kvstrata_b":
                rep["targets"][f"cross-process {size}: >= 95% hit"] = got >= 0.95 * stored
    for role in FIRST_ENGINES:
        u = ph[role].get("users")
        if u and "2" in {str(k) for k in u}:
            r2 = u.get("2") or u.get(2)
            rep["users"][role] = {k: r2[k] for k in r2 if k != "ids"}
    # Correctness: greedy ids and first-token top-5 of every storage-role hit against the
    # `none` role's recompute of the same prompt.
    mism, compared, top_diff = 0, 0, 0
    for size in spec["sizes"]:
        ref = ph["none"].get(f"single_{size}")
        if not ref:
            continue
        want_ids, want_top = ref["greedy16"]["ids"], ref["cold"]["top5"]
        for role in STORAGE_ROLES:
            s = ph[role].get(f"single_{size}") or ph[role].get(f"cross_{size}")
            if not s:
                continue
            compared += 1
            mism += s["greedy16"]["ids"] != want_ids
            hits = s.get("after_flush") or [s["first"]]
            top_diff += sum(h["top5"] != want_top for h in hits)
    for role in FIRST_ENGINES[1:]:
        a = _get(ph, role, "users", "2", "ids") or _get(ph, role, "users", 2, "ids")
        b = _get(ph, "none", "users", "2", "ids") or _get(ph, "none", "users", 2, "ids")
        if a and b:
            compared += len(a)
            mism += sum(x != y for x, y in zip(a, b))
    rep["correctness"] = {"compared": compared, "token_id_mismatches": mism,
                          "first_token_top5_differences": top_diff}
    rep["targets"]["0 token-id mismatches"] = mism == 0 if compared else None
    fault = ph["kvstrata_b"].get("fault")
    if fault:
        ok = (not fault["hung"] and not fault["errors"] and fault["completed"] == 6 and
              ((fault["after_restart"]["details"] or {}).get("storage") or 0) > 0)
        rep["fault"] = {k: fault[k] for k in ("completed", "errors", "hung", "ms",
                                              "storage_tokens", "restart_s")}
        rep["fault"]["storage_after_restart"] = (fault["after_restart"]["details"] or {}).get(
            "storage")
        rep["targets"]["daemon killed mid-run: server keeps serving, hits resume"] = ok
    return rep


def render(rep: Dict[str, Any], results: Dict[str, Any], spec: Dict[str, Any]) -> str:
    out: List[str] = []
    starts = {r: _get(results, r, "phases", "start_s") for r in ROLES}
    out.append(f"SGLang GPU benchmark: page {spec['page_size']}, GPU pool {spec['gpu_tokens']} "
               f"tokens, host pool {spec['host_gib']} GB; engine starts (s): {starts}")
    for r in ROLES:
        if r in results and (results[r].get("error") or results[r].get("rc")):
            out.append(f"  role {r}: rc={results[r].get('rc')} "
                       f"{(results[r].get('error') or '').strip().splitlines()[-1:]}")
    out.append("\nSingle request, TTFT ms (generate max_new_tokens=1); 'after flush' = GPU and "
               f"host caches flushed, median of {spec['repeats']}")
    out.append("| tokens | recompute (none) | file L3 hit | KVStrata L3 hit | KVStrata/file |"
               " GPU hit | storage tokens (file / kvstrata) |")
    out.append("|---|---|---|---|---|---|---|")
    for size, row in rep["single"].items():
        out.append(f"| {size} | {_get(row, 'none', 'after_flush_ms')} | "
                   f"{_get(row, 'file', 'after_flush_ms')} | "
                   f"{_get(row, 'kvstrata', 'after_flush_ms')} | {row.get('kvstrata_vs_file')} | "
                   f"{_get(row, 'none', 'gpu_hit_ms')} | "
                   f"{_get(row, 'file', 'storage_tokens')} / "
                   f"{_get(row, 'kvstrata', 'storage_tokens')} |")
    for size, row in rep["single"].items():
        if "kvstrata_t4" in row:
            out.append(f"  {size}: KVStrata with copy_threads 4: "
                       f"{_get(row, 'kvstrata_t4', 'after_flush_ms')} ms "
                       f"(storage tokens {_get(row, 'kvstrata_t4', 'storage_tokens')})")
    out.append("\nCross-process (a fresh engine B on the same storage), first request")
    for role, rows in rep["cross"].items():
        for size, c in rows.items():
            out.append(f"  {role} {size}: {c['ms']} ms, {c['storage_tokens']} storage tokens "
                       f"({100 * c['share']:.1f}% of the stored prefix)")
    out.append(f"\nMulti-turn, {spec['users']} users x {spec['user_tokens']} tokens "
               f"(+{spec['question_tokens']}), concurrency {spec['concurrency']}, round 2")
    for role, u in rep["users"].items():
        out.append(f"  {role}: {u['req_per_s']} req/s, TTFT p50 {u['ttft_p50_ms']} ms, "
                   f"p90 {u['ttft_p90_ms']} ms; tokens from storage {u['storage_tokens']}, "
                   f"host {u['host_tokens']}, device {u['device_tokens']}")
    out.append(f"\nCorrectness: {json.dumps(rep['correctness'])}")
    if "fault" in rep:
        out.append(f"Fault (kvstratad SIGKILLed during requests): {json.dumps(rep['fault'])}")
    out.append("\nTargets:")
    for k, v in rep["targets"].items():
        out.append(f"  {'PASS' if v else ('n/a ' if v is None else 'MISS')}  {k}")
    return "\n".join(out)


def main() -> int:
    return run_benchmark(parse_args(), ROLES, make_spec, report, render, "sglang_gpu.json",
                         HERE / "engine.py")


if __name__ == "__main__":
    sys.exit(main())
