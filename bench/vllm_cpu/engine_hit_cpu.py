"""A hybrid model's L1 hit in vLLM's real CPU engine, A/B between connector trees: the CPU of
the forward step and of every thread of the engine process.

The GPU bench (bench/vllm_gpu) times gpt-oss's hits on a lent H200; when a hit's forward step
there runs longer than before, this tells on CPU whether the connector's code costs more:
each tree given with --tree (a directory holding client/python and connector_vllm, e.g. an
old commit's `git archive`) runs in an engine process of its own (PYTHONPATH ahead of the
installed packages), the trees alternating round by round (the machine is shared and noisy).
The model is gpt-oss's layout at toy width (tiny_model.make_tiny_gemma3 with GPT_OSS_LAYERS:
Gemma 3's architecture, 8 layers, sliding windows of 128 tokens alternating with full
attention: two KV cache groups). Each engine stores an N-token prompt (its first request), then per repeat
resets vLLM's prefix cache and asks it again with max_tokens=1: the hit loads from L1
asynchronously (the load planner on, as on a GPU) and the request's forward pass computes
its last unit (a sliding-window group loads no unit of the last token). Per hit: the TTFT;
the forward pass (the metadata's bind -> wait_for_save, in the step whose layers called
wait_for_layer_load) and the CPU of each thread of the process in it (schedstat; threads
named by Python); the per-layer host ms and the connector's hook µs of the trace
(KVSTRATA_VLLM_TRACE); the CPU of every thread over the whole request.

    KVSTRATA_DAEMON=build-lead/daemon/server/kvstratad .venv-vllm-cpu/bin/python \\
      bench/vllm_cpu/engine_hit_cpu.py --tree old=/tmp/old --tree head=. --rounds 3
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "tests/e2e/vllm"), str(REPO / "tests/integration/python")]
CHILD_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_TARGET_DEVICE": "cpu",
             "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}


def child(args: argparse.Namespace) -> None:
    """One engine (this tree's connector): the stored prompt, then the hits; JSON on stdout."""
    from vllm import LLM, SamplingParams
    import kvstrata_vllm
    from thread_cpu import delta, snapshot
    from kvstrata_vllm.connector import KVStrataConnector

    # A step's forward pass: from the metadata's bind (before the forward; vLLM >= 0.30
    # starts asynchronous loads after it) to wait_for_save, when a layer waited for its load.
    forwards: List[Dict[str, Any]] = []
    mark: Dict[str, Any] = {}
    cls = KVStrataConnector
    bind, layer, save = cls.bind_connector_metadata, cls.wait_for_layer_load, cls.wait_for_save

    def bind_connector_metadata(self: Any, *a: Any, **k: Any) -> Any:
        mark.update(t=time.perf_counter(), threads=snapshot(), layers=0)
        return bind(self, *a, **k)

    def wait_for_layer_load(self: Any, *a: Any, **k: Any) -> Any:
        mark["layers"] = mark.get("layers", 0) + 1
        return layer(self, *a, **k)

    def wait_for_save(self: Any, *a: Any, **k: Any) -> Any:
        r = save(self, *a, **k)
        if mark.get("layers"):
            forwards.append({"ms": (time.perf_counter() - mark["t"]) * 1e3,
                             "layers": mark["layers"],
                             "threads": delta(mark["threads"], snapshot())})
        mark.clear()
        return r

    cls.bind_connector_metadata, cls.wait_for_layer_load, cls.wait_for_save = \
        bind_connector_metadata, wait_for_layer_load, wait_for_save
    extra = {"endpoint": args.endpoint, "reconnect_interval_s": 0.5, "load_planner": "on"}
    llm = LLM(model=args.model, dtype="float32", max_model_len=args.tokens + 64,
              enforce_eager=True, max_num_seqs=4, gpu_memory_utilization=0.1, seed=0,
              max_num_batched_tokens=args.tokens + 64,
              kv_transfer_config={"kv_connector": "KVStrataConnector",
                                  "kv_connector_module_path": "kvstrata_vllm",
                                  "kv_role": "kv_both", "kv_connector_extra_config": extra})
    params = SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True)
    prompt = {"prompt_token_ids": [4 + (i * 7 + args.seed * 13) % 480 for i in range(args.tokens)]}
    llm.generate([prompt], params, use_tqdm=False)  # computed and stored
    time.sleep(1.0)  # its stores land
    trace = Path(os.environ["KVSTRATA_VLLM_TRACE"])
    hits = []
    for _ in range(args.repeats):
        llm.reset_prefix_cache()
        offset = trace.stat().st_size
        forwards.clear()
        a = snapshot()
        t0 = time.perf_counter()
        out = llm.generate([prompt], params, use_tqdm=False)[0]
        ms = (time.perf_counter() - t0) * 1e3
        b = snapshot()
        with open(trace) as f:
            f.seek(offset)
            events = [json.loads(line) for line in f if line.strip()]
        hits.append({"ttft_ms": ms, "cached": int(out.num_cached_tokens or 0),
                     "forwards": list(forwards), "threads": delta(a, b), "events": events})
        time.sleep(0.2)
    print("RESULT " + json.dumps({"connector": kvstrata_vllm.__file__, "hits": hits}), flush=True)
    os._exit(0)


def summarize(hit: Dict[str, Any]) -> Dict[str, float]:
    """The figures of one hit: TTFT, its forward step and its threads."""
    fwd = hit["forwards"][-1] if hit["forwards"] else {"ms": 0, "threads": {}}
    main = [v for k, v in fwd["threads"].items() if k.startswith("MainThread")]
    others = sum(v[0] for k, v in fwd["threads"].items() if not k.startswith("MainThread"))
    ev = hit["events"]
    hooks = [e for e in ev if e["ev"] == "hooks"]
    layer = hooks[-1] if hooks else {}
    fin = [e for e in ev if e["ev"] == "step_finished" and "wait_for_save" in e.get("us", {})]
    us = fin[-1]["us"] if fin else {}
    sched = [e for e in ev if e["ev"] == "sched" and "get_num_new_matched_tokens" in e["us"]]
    req_main = [v[0] for k, v in hit["threads"].items() if k.startswith("MainThread")]
    req_others = sum(v[0] for k, v in hit["threads"].items() if not k.startswith("MainThread"))
    return {"ttft": hit["ttft_ms"], "fwd": fwd["ms"], "fwd_main_cpu": main[0][0] if main else 0,
            "fwd_other_cpu": others, "layer": layer.get("median_ms", 0.0),
            "layers": layer.get("total_ms", 0.0),
            "wait_for_layer_load_us": us.get("wait_for_layer_load", 0.0),
            "save_kv_layer_us": us.get("save_kv_layer", 0.0),
            "wait_for_save_us": us.get("wait_for_save", 0.0),
            "start_load_kv_us": us.get("start_load_kv", 0.0),
            "gnnmt_us": sched[0]["us"]["get_num_new_matched_tokens"] if sched else 0.0,
            "req_main_cpu": req_main[0] if req_main else 0.0, "req_other_cpu": req_others}


def parent(args: argparse.Namespace) -> None:
    from kvs_testing import Daemon, run_daemon, short_tmpdir
    from tiny_model import GPT_OSS_LAYERS, make_tiny_gemma3

    trees = [t.split("=", 1) for t in args.tree]
    work = short_tmpdir()
    model = make_tiny_gemma3(work / "model", window=128, hidden=args.hidden,
                             layer_types=GPT_OSS_LAYERS, max_len=args.tokens + 64)
    (work / "d").mkdir()
    daemon = run_daemon(Daemon(work / "d", {"l1.capacity": "2GiB"}))
    d = next(daemon)
    results: Dict[str, List[Dict[str, float]]] = {name: [] for name, _ in trees}
    threads_seen: Dict[str, Dict[str, List[float]]] = {name: {} for name, _ in trees}
    try:
        for r in range(args.rounds):
            order = trees if r % 2 == 0 else trees[::-1]
            for name, tree in order:
                trace = work / f"trace-{name}-{r}.jsonl"
                env = dict(os.environ, **CHILD_ENV, KVSTRATA_VLLM_TRACE=str(trace),
                           PYTHONPATH=os.pathsep.join(
                               [str(Path(tree) / "client/python"),
                                str(Path(tree) / "connector_vllm")]))
                cmd = [sys.executable, __file__, "--child", "--model", str(model),
                       "--endpoint", d.endpoint, "--tokens", str(args.tokens),
                       "--repeats", str(args.repeats), "--seed", str(r * 10 + len(results[name]))]
                p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
                line = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
                if p.returncode != 0 or not line:
                    raise SystemExit(f"{name} failed (rc {p.returncode}):\n{p.stderr[-4000:]}")
                res = json.loads(line[-1][7:])
                assert res["connector"].startswith(str(Path(tree).resolve())), res["connector"]
                for hit in res["hits"][1:]:  # the first hit warms the engine's code paths
                    s = summarize(hit)
                    results[name].append(s)
                    fwd = hit["forwards"][-1]
                    for k, v in fwd["threads"].items():
                        threads_seen[name].setdefault(k.split("[")[0], []).append(v[0])
                print(f"round {r} {name}: " + ", ".join(
                    f"{k} {statistics.median(s[k] for s in results[name][-(args.repeats - 1):]):.3f}"
                    for k in ("ttft", "fwd", "fwd_main_cpu", "fwd_other_cpu", "layer")),
                    flush=True)
    finally:
        next(daemon, None)
    print(f"\n{args.tokens} tokens, {args.rounds} rounds x {args.repeats - 1} hits per tree "
          f"(median; ms unless us)")
    keys = list(next(iter(results.values()))[0].keys())
    print("  " + " ".join(f"{k:>10.10}" for k in ["tree"] + keys))
    for name, rows in results.items():
        print("  " + f"{name:>10.10} " + " ".join(
            f"{statistics.median(s[k] for s in rows):10.3f}" for k in keys))
    print("\nThreads other than the main one during the forward step (ms on a CPU: sum over the "
          "hits / hits)")
    for name, seen in threads_seen.items():
        n = len(results[name])
        print(f"  {name}: " + (", ".join(f"{k} {sum(v) / n:.3f}" for k, v in sorted(
            seen.items(), key=lambda kv: -sum(kv[1])) if k != "MainThread") or "none"))
    if args.json:
        Path(args.json).write_text(json.dumps({"results": results, "threads": threads_seen}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tree", action="append", default=[], help="name=DIR (repeatable)")
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json")
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--model")
    ap.add_argument("--endpoint")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.child:
        child(args)
    else:
        parent(args)


if __name__ == "__main__":
    main()
