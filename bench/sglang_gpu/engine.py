#!/usr/bin/env python3
"""One SGLang engine process of the SGLang GPU benchmark (run.py starts one per role).

    python3 engine.py --role ROLE --spec SPEC.json --out RESULT.json

A real SGLang 0.5.17 offline engine (sglang.Engine: the same tokenizer manager, scheduler
process and HiCache as `sglang.launch_server`, without the HTTP front end): dummy
Llama-3.1-8B weights (bf16, seeded, identical in every process), token-id prompts,
`--enable-hierarchical-cache` with the page_first host layout, and by role:
  none        HiCache without an L3 storage backend (GPU + host pool only)
  file        SGLang's own `file` backend (HiCacheFile) in <workdir>/hicache_file
  kvstrata    the `dynamic` backend kvstrata_sglang.KVStrataStorage on the run's kvstratad
  kvstrata_tN the same with the connector's copy_threads = N
  file_b / kvstrata_b   a second, fresh engine process on the same storage: cross-process
              hits from what `file` / `kvstrata` stored; kvstrata_b also kills the daemon
              while requests run.
The result JSON is rewritten after every phase, so a killed role still reports what it did.
"""
from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import random
import re
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, List

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "vllm_gpu"))  # daemon_ctl: the one daemon controller


def _use_sgl_kernel_norm() -> None:
    """sgl_kernel 0.4.5 hands RMSNorm to flashinfer whenever `flashinfer.norm` imports, and
    flashinfer JIT-compiles that kernel from CUDA sources the carry leaves out
    (scripts/sglang_carry/prepare.sh). With `flashinfer.norm` unimportable sgl_kernel runs
    its own precompiled RMSNorm: the same in every role. Runs at import, so SGLang's spawned
    scheduler process (which imports this file as __mp_main__) does it too."""
    try:
        importlib.import_module("flashinfer")
    except ImportError:
        return
    sys.modules["flashinfer.norm"] = None  # type: ignore[assignment]


_use_sgl_kernel_norm()


class Result:
    """The role's JSON result, written to disk after every update."""

    def __init__(self, path: Path, role: str) -> None:
        self.path = path
        self.data: Dict[str, Any] = {"role": role, "phases": {}, "events": []}

    def set(self, key: str, value: Any) -> None:
        self.data["phases"][key] = value
        self.flush()

    def event(self, what: str, **fields: Any) -> None:
        fields.update(what=what, t=round(time.time(), 3))
        self.data["events"].append(fields)
        print(json.dumps(fields), flush=True)
        self.flush()

    def flush(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1))
        tmp.replace(self.path)


def prompt(seed: int, n: int, vocab: int) -> List[int]:
    rng = random.Random(seed)
    return [rng.randrange(1000, vocab - 1000) for _ in range(n)]


def engine_args(spec: Dict[str, Any], role: str) -> Dict[str, Any]:
    args = dict(model_path=spec["model"], load_format="dummy", dtype="bfloat16",
                skip_tokenizer_init=True, attention_backend="triton",
                sampling_backend="pytorch", page_size=spec["page_size"],
                max_total_tokens=spec["gpu_tokens"], mem_fraction_static=0.85,
                chunked_prefill_size=spec["chunked_prefill"], cuda_graph_max_bs_decode=8,
                disable_prefill_cuda_graph=True,
                context_length=spec["context_length"], enable_hierarchical_cache=True,
                hicache_mem_layout="page_first", hicache_size=spec["host_gib"],
                hicache_write_policy="write_through", random_seed=0, log_level="warning",
                enable_cache_report=True)
    base = role.split("_")[0]
    if base != "none":
        args["hicache_storage_prefetch_policy"] = "wait_complete"
    if base == "file":
        args["hicache_storage_backend"] = "file"
    elif base == "kvstrata":
        args["hicache_storage_backend"] = "dynamic"
        extra = {"backend_name": "kvstrata", "module_path": "kvstrata_sglang",
                 "class_name": "KVStrataStorage", "interface_v1": 1,
                 "endpoint": spec["daemon"]["workdir"] + "/kvstrata.sock"}
        threads = re.search(r"_t(\d+)", role)   # kvstrata_t4: copy_threads 4
        if threads:
            extra["copy_threads"] = int(threads.group(1))
        args["hicache_storage_backend_extra_config"] = json.dumps(extra)
    return args


class Bench:
    def __init__(self, spec: Dict[str, Any], role: str, res: Result) -> None:
        import sglang  # noqa: F401  (imported late: the environment is set first)

        self.spec, self.role, self.res = spec, role, res
        self.base = role.split("_")[0]
        self.file_dir = Path(spec["workdir"]) / "hicache_file"
        self.daemon = None
        self.flush_waits: List[float] = []   # seconds each flush waited for the scheduler
        if self.base == "kvstrata":
            from daemon_ctl import DaemonCtl
            d = spec["daemon"]
            self.daemon = DaemonCtl(d["binary"], d["workdir"], d["settings"])
        t0 = time.monotonic()
        self.engine = sglang.Engine(**engine_args(spec, role))
        res.set("start_s", round(time.monotonic() - t0, 1))

    # ---------------------------------------------------------------- requests

    def generate(self, ids: List[int], max_tokens: int = 1) -> Dict[str, Any]:
        """One request; wall time (TTFT for max_tokens=1), output ids, first-token top-5
        logprobs and the cached-token breakdown (device / host / storage)."""
        t0 = time.perf_counter()
        out = self.engine.generate(input_ids=ids, sampling_params={
            "max_new_tokens": max_tokens, "temperature": 0.0, "ignore_eos": True},
            return_logprob=True, top_logprobs_num=5)
        ms = (time.perf_counter() - t0) * 1e3
        meta = out.get("meta_info", {})
        top = meta.get("output_top_logprobs") or [[]]
        return {"ms": round(ms, 2), "ids": out.get("output_ids", []),
                "top5": [[round(float(lp), 4), int(t)] for lp, t, *_ in (top[0] or [])],
                "cached": meta.get("cached_tokens", 0),
                "details": meta.get("cached_tokens_details")}

    def flush(self) -> None:
        """Flush the GPU radix cache and the host pool (HiRadixCache.reset): the next hit of
        a storage role can only come from L3. Retried while requests drain."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < 180.0:
            out = self.engine.flush_cache()
            if getattr(out, "success", True):
                self.flush_waits.append(round(time.monotonic() - t0, 2))
                return
            time.sleep(0.2)
        raise RuntimeError("flush_cache kept failing for 180 s")

    def stored_pages(self) -> int:
        if self.base == "file":
            try:
                return sum(1 for n in os.listdir(self.file_dir) if n.endswith(".bin"))
            except FileNotFoundError:
                return 0
        if self.base == "kvstrata":
            try:
                return sum(n.blocks for n in self.daemon.namespaces())
            except Exception:  # noqa: BLE001 (daemon down in the fault phase)
                return -1
        return 0

    def wait_stored(self, want: int, timeout_s: float = 60.0) -> Dict[str, Any]:
        """Until L3 holds `want` more pages than before, or stops growing for 2 s."""
        t0 = time.monotonic()
        last, since = self.stored_pages(), time.monotonic()
        while time.monotonic() - t0 < timeout_s:
            time.sleep(0.05)
            now = self.stored_pages()
            if now >= want:
                break
            if now != last:
                last, since = now, time.monotonic()
            elif time.monotonic() - since > 2.0:
                break
        return {"pages": self.stored_pages(), "want": want,
                "wait_s": round(time.monotonic() - t0, 2)}

    # ------------------------------------------------------------------ phases

    def single(self) -> None:
        """Per size: cold (recompute), GPU hit, then `repeats` times: flush + the same
        prompt (an L3 hit for storage roles, a recompute for `none`), and one 16-token
        greedy run after a flush for the token-id comparison."""
        spec, page = self.spec, self.spec["page_size"]
        for size in spec["sizes"]:
            ids = prompt(1000 + size, size, spec["vocab"])
            row: Dict[str, Any] = {"tokens": size}
            before = self.stored_pages()
            row["cold"] = self.generate(ids)
            row["gpu_hit"] = self.generate(ids)
            if self.base != "none":
                row["stored"] = self.wait_stored(before + size // page)
            hits = []
            for _ in range(spec["repeats"]):
                self.flush()
                hits.append(self.generate(ids))
            row["after_flush"] = hits
            row["after_flush_ms_median"] = statistics.median(h["ms"] for h in hits)
            self.flush()
            row["greedy16"] = self.generate(ids, max_tokens=16)
            self.res.set(f"single_{size}", row)
            self.res.event("single", tokens=size, cold_ms=row["cold"]["ms"],
                           gpu_hit_ms=row["gpu_hit"]["ms"],
                           after_flush_ms=row["after_flush_ms_median"],
                           storage_tokens=(hits[-1]["details"] or {}).get("storage"))

    def cross(self) -> None:
        """A fresh engine process (B): each size's prompt once, hits only from what the
        first engine of this backend stored."""
        for size in self.spec["sizes"]:
            ids = prompt(1000 + size, size, self.spec["vocab"])
            first = self.generate(ids)
            self.flush()
            again = self.generate(ids)
            self.flush()
            greedy = self.generate(ids, max_tokens=16)
            row = {"tokens": size, "first": first, "second": again, "greedy16": greedy}
            self.res.set(f"cross_{size}", row)
            self.res.event("cross", tokens=size, ms=first["ms"],
                           storage_tokens=(first["details"] or {}).get("storage"),
                           cached=first["cached"])

    def users(self) -> None:
        """Multi-turn: `users` conversations of `user_tokens` tokens each (more than the GPU
        and host pools hold together), every one seen once (round 1), then each conversation
        again with a new question appended (round 2), `concurrency` requests at a time:
        throughput and TTFT p50/p90 of round 2."""
        spec = self.spec
        n, size, q = spec["users"], spec["user_tokens"], spec["question_tokens"]
        convs = [prompt(50_000 + u, size, spec["vocab"]) for u in range(n)]
        rounds = {}
        for rnd in (1, 2):
            reqs = [c + prompt(90_000 + 100 * rnd + u, q, spec["vocab"])
                    for u, c in enumerate(convs)]
            t0 = time.perf_counter()
            lat = self._concurrent(reqs, spec["concurrency"])
            wall = time.perf_counter() - t0
            q_sorted = sorted(x["ms"] for x in lat)
            rounds[rnd] = {
                "wall_s": round(wall, 3), "req_per_s": round(n / wall, 3),
                "ttft_p50_ms": round(statistics.median(q_sorted), 1),
                "ttft_p90_ms": round(q_sorted[int(0.9 * (len(q_sorted) - 1))], 1),
                "storage_tokens": sum(((x["details"] or {}).get("storage") or 0) for x in lat),
                "host_tokens": sum(((x["details"] or {}).get("host") or 0) for x in lat),
                "device_tokens": sum(((x["details"] or {}).get("device") or 0) for x in lat),
                "ids": [x["ids"] for x in lat]}
            if rnd == 1 and self.base != "none":
                rounds["stored_after_round1"] = self.wait_stored(10 ** 9, timeout_s=30.0)
            self.res.set("users", rounds)
            self.res.event("users_round", round=rnd, **{k: v for k, v in rounds[rnd].items()
                                                       if k != "ids"})

    def _concurrent(self, reqs: List[List[int]], concurrency: int) -> List[Dict[str, Any]]:
        engine = self.engine
        sem = asyncio.Semaphore(concurrency)

        async def one(ids: List[int]) -> Dict[str, Any]:
            async with sem:
                t0 = time.perf_counter()
                out = await engine.async_generate(input_ids=ids, sampling_params={
                    "max_new_tokens": 1, "temperature": 0.0, "ignore_eos": True})
                meta = out.get("meta_info", {})
                return {"ms": (time.perf_counter() - t0) * 1e3, "ids": out.get("output_ids"),
                        "details": meta.get("cached_tokens_details")}

        async def all_of() -> List[Dict[str, Any]]:
            return await asyncio.gather(*(one(r) for r in reqs))

        return engine.loop.run_until_complete(all_of())

    def fault(self) -> None:
        """kvstratad SIGKILLed while L3-hit requests run: every request completes (misses
        recompute), the engine keeps serving; after a restart hits resume."""
        spec = self.spec
        size = spec["sizes"][0]
        ids = prompt(1000 + size, size, spec["vocab"])
        out: Dict[str, Any] = {}
        done: List[Dict[str, Any]] = []
        errors: List[str] = []

        def requests() -> None:
            for i in range(6):
                try:
                    self.flush()
                    done.append(self.generate(ids + prompt(7000 + i, 16, spec["vocab"])))
                except Exception as e:  # noqa: BLE001 (recorded, the phase judges it)
                    errors.append(repr(e))

        t = threading.Thread(target=requests)
        t.start()
        time.sleep(0.05)
        self.daemon.kill9()
        out["killed_at_request"] = len(done)
        t.join(timeout=300)
        out["completed"] = len(done)
        out["errors"] = errors
        out["hung"] = t.is_alive()
        out["ms"] = [d["ms"] for d in done]
        out["storage_tokens"] = [(d["details"] or {}).get("storage") for d in done]
        out["restart_s"] = round(self.daemon.start(), 2)
        # After the restart L1 is empty (L2 off): store once more, then a hit must come back.
        self.flush()
        self.generate(ids)
        out["stored_after_restart"] = self.wait_stored(size // spec["page_size"])
        for _ in range(30):   # the connector reconnects on its own (fail-safe link)
            self.flush()
            r = self.generate(ids)
            if ((r["details"] or {}).get("storage") or 0) > 0:
                break
            time.sleep(0.5)
        out["after_restart"] = r
        self.res.set("fault", out)
        self.res.event("fault", completed=out["completed"], errors=len(errors),
                       hung=out["hung"], storage_after_restart=(r["details"] or {}).get("storage"))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--role", required=True)
    ap.add_argument("--spec", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    spec = json.loads(Path(args.spec).read_text())
    res = Result(Path(args.out), args.role)
    os.environ["SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR"] = str(Path(spec["workdir"]) /
                                                               "hicache_file")
    try:
        bench = Bench(spec, args.role, res)
        res.event("started", start_s=res.data["phases"]["start_s"])
        # Warm-up: compile the Triton kernels of every shape the phases use.
        bench.generate(prompt(1, 2048, spec["vocab"]), max_tokens=4)
        bench.flush()
        if args.role.endswith("_b"):
            bench.cross()
            if bench.base == "kvstrata" and spec.get("fault", True):
                bench.fault()
        else:
            bench.single()
            if spec["users"]:
                bench.users()
        res.set("flush_waits_s", bench.flush_waits)
        res.event("done")
        bench.engine.shutdown()
    except Exception:  # noqa: BLE001 (reported in the result)
        import traceback
        res.data["error"] = traceback.format_exc()
        res.flush()
        print(res.data["error"], file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
