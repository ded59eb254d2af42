#!/usr/bin/env python3
"""What an LLM engine sees from kvstratad in GPU mode: ONE SubmitLoad / SubmitStore job per
request, from a client process, through the real daemon, for several KV-cache layouts.

    python3 bench/gpu/engine_jobs.py --out engine_jobs.json

Every layout is a registered CUDA KV cache of Llama-3.1-8B dimensions (32 layers, 8 KV
heads, head 128, bf16) sized for 2 x the largest request (stored blocks + load
destinations; 8 GiB at 32K tokens of 2 MiB blocks), freed before the next layout:
  nhd16        vLLM FlashAttention per-layer [2, N, 16, 8, 128]
  hnd16        vLLM HND: physical [2, N, 8, 16, 128] seen through vLLM's permuted NHD view
  nhd32        vLLM per-layer [2, N, 32, 8, 128] (32-token blocks, 4 MiB)
  flashinfer   vLLM FlashInfer per-layer [N, 2, 16, 8, 128]
  mla          vLLM MLA per-layer [N, 16, 576] (DeepSeek-like latent; 32 layers, not 61)
  cross_layer  vLLM cross-layer, one tensor [N, 32, 2, 16, 8, 128]
  sglang       SGLang MHA device pool: per-layer k/v buffers [N*16, 8, 128], page 16
  sglang_mla   SGLang MLA device pool: per-layer kv buffers [N*16, 1, 576], page 16 (32 layers)
For each layout and size (1K / 8K / 32K tokens) the blocks are stored once, then for
--repeats runs the destination blocks are poisoned and one load job fills them: submit_us
is the submit_load call alone (time.perf_counter around it), job_ms is submit to
completion (wait_job); bytes are checked on the first run. Over job frames (the default
on a Unix socket) the call returns once the frame is written: the daemon's answer is read
by the session's reader thread, after the call. Stores likewise: one
submit_store of n blocks under fresh keys per run (evicted afterwards; the first run is
checked by loading it back). p50 is the median; p99 is nearest-rank, i.e. the max of 20.
For nhd16 at 8K tokens, loads are also timed while a store job of 8K other tokens is in
flight (submitted just before), next to the same load alone.

Ceilings, measured in this process before anything else: a torch copy of a pinned uint8
CPU tensor of 1 GiB (and 128 MiB) into a GPU tensor (non_blocking + synchronize, median of
5 after a warm-up), and GPU -> pinned likewise. Targets (PASS/FAIL in the table): 8K-token
load p50 >= 90% of the 1 GiB H2D ceiling; load p99 <= 1.2 x p50; 1K-token load <= 1.3 x
bytes / 128 MiB H2D ceiling; submit p50 <= 300 us for <= 512 blocks; stores of >= 8K
tokens >= 85% of the 1 GiB D2H ceiling.

The daemon is started (through load_latency.start_daemon: $KVSTRATA_DAEMON, .bundle/ or
build/) with --l1 of L1 and no L2, unless --endpoint names a running one.
"""
from __future__ import annotations

import argparse
import array
import gc
import json
import math
import os
import random
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
import load_latency  # noqa: E402  (start_daemon, stop_daemon, log, process_cpu_seconds)
from daemon_stages import ClientTimeline, report_stages  # noqa: E402
from load_latency import log, process_cpu_seconds  # noqa: E402

# The KV caches of the engines' layouts (the connectors' sources), ceilings, wait_ok.
from kv_caches import (HEAD, KV_HEADS, LAYERS, LAYOUTS, LLAMA, build_cache,  # noqa: E402
                       measure_ceilings, wait_ok)

SKIPPED = {  # Asked for, but no connector has such a GPU layout.
    "sglang_layer_first": "SGLang's layer_first is a host-pool layout; kvstrata_sglang.device_pool "
    "takes the per-layer device pool and always fills L1 in page_first_direct order",
    "sglang_page_first": "SGLang's page_first is a host-pool layout; kvstrata_sglang.device_pool "
    "takes the per-layer device pool and always fills L1 in page_first_direct order",
}
TIMELINE = ClientTimeline()  # --timeline: the client's side of each timed job.
TARGETS = {"load_8k_pct_h2d": 0.90, "p99_over_p50": 1.2, "load_1k_over_ceiling": 1.3,
           "submit_us_512_blocks": 300.0, "store_pct_d2h": 0.85}
_evict_ok = True


def measure_floors(s: Any, calls: int = 200) -> Dict[str, float]:
    """The client's gRPC round trip with nothing to do (Heartbeat): the floor of a submit."""
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        s.heartbeat()
        times.append(time.perf_counter() - t0)
    return {"heartbeat_us_p50": statistics.median(times) * 1e6, "heartbeat_us_p99": p99(times) * 1e6}


def measure_submit_parts(s: Any, calls: int = 200) -> Dict[str, float]:
    """Where a 512-block submit's time goes before the daemon's job work: the client's own
    preparation (key and block id checks, building the job frame), a whole job-frame
    submit that waits for the daemon's answer, refused at its registration check (an unknown
    registration; FastPathSocket.submit), and the session's submit_load of the same frame,
    which returns once it is written (its refusal arrives as a failed completion; 1 ms
    between calls, as between an engine's steps)."""
    import kvstrata
    from kvstrata.cuda import checked_block_ids
    from kvstrata.host import key_bytes
    from kvstrata.fast_path import _REQUEST, KIND_LOAD, MAGIC, FastPathSocket

    ns = s.register_namespace(engine="vllm", model=LLAMA, dtype="bfloat16", num_layers=LAYERS,
                              num_kv_heads=KV_HEADS, head_size=HEAD, tokens_per_block=16,
                              kv_layout="vllm_nhd", salt=f"engine-jobs-parts-{os.getpid()}")
    keys, ids = [os.urandom(32) for _ in range(512)], range(512)

    def prep() -> bytes:
        k = key_bytes(keys)
        b = checked_block_ids(k, ids, None)
        return b"".join((_REQUEST.pack(MAGIC, 1, KIND_LOAD, 1, 1, len(k), 32, 0, 1, 0),
                         b"".join(k), array.array("I", b).tobytes()))

    js = FastPathSocket(s.open_response.lookup_socket, 10.0)

    def refused() -> None:
        try:
            js.submit(KIND_LOAD, s.session_id, ns.namespace_id, 1 << 40, keys, list(ids))
        except kvstrata.KVStrataError:
            pass

    refused_jobs: List[int] = []

    def session_submit() -> None:
        refused_jobs.append(s.submit_load(ns, 1 << 40, keys, ids))

    out = {}
    for name, fn, pause in (("client_prep_us", prep, 0.0), ("refused_submit_us", refused, 0.0),
                            ("session_submit_us", session_submit, 0.001)):
        times = []
        for _ in range(calls):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
            time.sleep(pause)
        out[name + "_p50"] = statistics.median(times) * 1e6
    js.close()
    s.wait_jobs(refused_jobs, timeout=30)  # Their refusals, taken off the session's table.
    return out


def rpc_means(client: Any) -> Dict[str, float]:
    """Mean daemon-side time of the submit calls (and Heartbeat), from its metrics."""
    try:
        from prom_text import scrape  # tests/integration/python, on sys.path via load_latency

        m = scrape(client.get_status().metrics_address)
    except Exception as err:  # No metrics endpoint: the figure is simply missing.
        log(f"metrics not read: {err}")
        return {}
    out = {}
    for method in ("Control.SubmitLoad", "Control.SubmitStore", "FastPath.SubmitLoad",
                   "FastPath.SubmitStore", "Control.Heartbeat"):
        total = m.get("kvstrata_rpc_duration_seconds_sum", method=method)
        count = m.get("kvstrata_rpc_duration_seconds_count", method=method)
        if total is not None and count:
            out[method] = total / count * 1e6
    return out


def p99(xs: List[float]) -> float:
    """Nearest-rank 99th percentile (the max for fewer than 100 samples)."""
    s = sorted(xs)
    return s[min(len(s) - 1, math.ceil(0.99 * len(s)) - 1)]


def make_row(layout: str, op: str, tokens: int, blocks: int, nbytes: int, subs: List[float],
             jobs: List[float], ceil: Dict[str, float], cpu_s: Optional[float],
             daemon: Optional[List[float]] = None) -> Dict[str, Any]:
    j50, s50 = statistics.median(jobs), statistics.median(subs)
    gbps = nbytes / j50 / 1e9
    ceiling = ceil["h2d_1GiB_gbps"] if op.startswith("load") else ceil["d2h_1GiB_gbps"]
    row = {"layout": layout, "op": op, "tokens": tokens, "blocks": blocks, "bytes": nbytes,
           "repeats": len(jobs), "submit_us_p50": s50 * 1e6, "submit_us_p99": p99(subs) * 1e6,
           "job_ms_p50": j50 * 1e3, "job_ms_p99": p99(jobs) * 1e3, "job_ms_min": min(jobs) * 1e3,
           "gbps_p50": gbps, "pct_ceiling": 100 * gbps / ceiling, "verified": True,
           "daemon_cpu_ms_per_gb": None if cpu_s is None else cpu_s * 1e3 / (nbytes * len(jobs) / 1e9),
           "checks": {}}
    if daemon and all(daemon):  # JobCompletion.elapsed_us: the daemon's own job time.
        row.update(daemon_ms_p50=statistics.median(daemon) * 1e3, daemon_ms_p99=p99(daemon) * 1e3)
    c = row["checks"]
    if op == "load":
        if tokens == 8192:
            c["p50>=90%H2D"] = gbps >= TARGETS["load_8k_pct_h2d"] * ceiling
        c["p99<=1.2xp50"] = p99(jobs) <= TARGETS["p99_over_p50"] * j50
        if tokens == 1024:
            c["<=1.3xceil"] = j50 <= TARGETS["load_1k_over_ceiling"] * nbytes / (ceil["h2d_128MiB_gbps"] * 1e9)
    if op == "store" and tokens >= 8192:
        c["p50>=85%D2H"] = gbps >= TARGETS["store_pct_d2h"] * ceiling
    if op in ("load", "store") and blocks <= 512:
        c["submit<=300us"] = s50 * 1e6 <= TARGETS["submit_us_512_blocks"]
    return row


def run_layout(s: Any, name: str, sizes: List[int], args: argparse.Namespace,
               ceil: Dict[str, float], pid: Optional[int]) -> Tuple[Dict[str, Any], List[Dict[str, Any]]]:
    """Every measurement of one layout: (its summary, its rows). Raises on failed jobs."""
    import kvstrata

    tpb = 32 if name == "nhd32" else 16
    counts = [t // tpb for t in sizes if t % tpb == 0]
    if len(counts) < len(sizes):
        log(f"{name}: sizes not a multiple of {tpb} tokens left out")
    if not counts:
        return {"status": "skipped", "reason": f"no size is a multiple of {tpb} tokens"}, []
    n_max = max(counts)
    cache = build_cache(name, 2 * n_max)
    info: Dict[str, Any] = {"status": "ok", "layout": cache.layout,
                            "spec": {k: str(v) for k, v in cache.spec.items()}}
    try:
        ns = s.register_namespace(**cache.spec, salt=f"engine-jobs-{os.getpid()}-{name}-{time.time_ns()}")
        t0 = time.perf_counter()
        reg = s.register_cuda_kv_caches(ns, cache.pieces())
        info["register_s"] = time.perf_counter() - t0
    except (ValueError, TypeError, kvstrata.KVStrataError) as err:
        return {"status": "skipped", "reason": f"{type(err).__name__}: {err}"}, []
    d = reg.description
    bb = ns.bytes_per_block
    info.update(block_bytes=bb, tokens_per_block=tpb, num_blocks=d.num_blocks,
                pieces_per_block=len(d.pieces), allocations=d.allocations,
                cache_gib=d.num_blocks * bb / 2**30)
    log(f"{name}: {d.num_blocks} blocks of {bb / 2**20:.2f} MiB ({info['cache_gib']:.1f} GiB), "
        f"{len(d.pieces)} pieces per block, registered in {info['register_s'] * 1e3:.0f} ms")
    rng = random.Random(name)
    rows: List[Dict[str, Any]] = []
    daemon_s: List[float] = []  # Daemon job times of the current row (timed() appends).

    poison, same = cache.poison, cache.same

    def done(job: int, what: str) -> float:
        """Waits for the job; returns the daemon's own time for it (s; 0 if not reported)."""
        return wait_ok(s, job, f"{name}: {what}")

    def timed(submit: Callable[..., int], keys: List[bytes], ids: range, what: str) -> Tuple[float, float]:
        w0 = time.time()
        t0 = time.perf_counter()
        job = submit(ns, reg, keys, ids)
        t1 = time.perf_counter()
        daemon_s.append(done(job, what))
        t2 = time.perf_counter()
        if args.timeline:  # Beside the daemon's stages on the wall clock (main() joins them).
            TIMELINE.note(f"{name} {'load' if submit == s.submit_load else 'store'} {len(keys)}",
                          w0, time.time())
        return t1 - t0, t2 - t0

    def evict(keys: List[bytes]) -> None:
        global _evict_ok
        if _evict_ok:
            try:
                s.client.evict(fingerprint=ns.fingerprint, keys=keys)
            except kvstrata.KVStrataError as err:
                _evict_ok = False
                log(f"Evict failed ({err}); stored test blocks stay in L1 until it evicts them")

    cpu = lambda: process_cpu_seconds(pid)  # noqa: E731
    try:
        poison(0, n_max, lambda v: v.random_(0, 256))  # The stored blocks' contents.
        keys = [rng.randbytes(32) for _ in range(n_max)]
        t0 = time.perf_counter()
        done(s.submit_store(ns, reg, keys, range(n_max)), f"store of {n_max} blocks")
        info["store_all_gbps"] = n_max * bb / (time.perf_counter() - t0) / 1e9
        dst = n_max  # Loads land in blocks [n_max, n_max + n).
        for n in counts:
            for _ in range(args.warmup):
                poison(dst, n)
                timed(s.submit_load, keys[:n], range(dst, dst + n), "warm-up load")
            subs, jobs, cpu_s = [], [], 0.0
            daemon_s.clear()
            for rep in range(args.repeats):
                poison(dst, n)
                c0 = cpu()
                sub, job = timed(s.submit_load, keys[:n], range(dst, dst + n), f"load of {n} blocks")
                cpu_s += cpu() - c0
                subs.append(sub), jobs.append(job)
                if rep == 0 and not same(dst, 0, n):
                    raise RuntimeError(f"{name}: load of {n} blocks: bytes differ from the stored ones")
            rows.append(make_row(name, "load", n * tpb, n, n * bb, subs, jobs, ceil,
                                 cpu_s if pid else None, list(daemon_s)))
            print_row(rows[-1])
        if name == "nhd16" and args.overlap and 512 <= n_max:
            rows.extend(run_overlap(s, ns, reg, keys, n_max, bb, args, ceil, rng, poison, same,
                                    done, timed, evict))
        for n in counts:
            subs, jobs, cpu_s = [], [], 0.0
            stored_s: List[float] = []
            for rep in range(-args.warmup, args.repeats):
                fresh = [rng.randbytes(32) for _ in range(n)]
                c0 = cpu()
                ids = range(n - 1, -1, -1) if args.descending_stores else range(n)
                sub, job = timed(s.submit_store, fresh, ids, f"store of {n} blocks")
                if rep >= 0:
                    cpu_s += cpu() - c0
                    subs.append(sub), jobs.append(job), stored_s.append(daemon_s[-1])
                if rep == 0:  # Check the stored bytes by loading them back.
                    poison(dst, n)
                    back = range(dst + n - 1, dst - 1, -1) if args.descending_stores else range(dst, dst + n)
                    timed(s.submit_load, fresh, back, "load-back of a store")
                    if not same(dst, 0, n):
                        raise RuntimeError(f"{name}: store of {n} blocks: loaded back bytes differ")
                evict(fresh)
            rows.append(make_row(name, "store", n * tpb, n, n * bb, subs, jobs, ceil,
                                 cpu_s if pid else None, stored_s))
            print_row(rows[-1])
    finally:
        try:
            s.unregister_cuda_kv_caches(reg)
            for p in s.client.clear(fingerprint=ns.fingerprint):
                if p.done:
                    break
        except kvstrata.KVStrataError as err:
            log(f"{name}: cleaning up failed: {err}")
    return info, rows  # main() frees the cache (and the registration, which holds it too).


def run_overlap(s: Any, ns: Any, reg: Any, keys: List[bytes], n_max: int, bb: int,
                args: argparse.Namespace, ceil: Dict[str, float], rng: random.Random,
                poison: Callable, same: Callable, done: Callable, timed: Callable,
                evict: Callable) -> List[Dict[str, Any]]:
    """nhd16, 8K tokens: a load job right after a store job of 8K other tokens, vs alone."""
    n, dst = 512, n_max
    alone, with_store, subs, store_jobs = [], [], [], []
    for rep in range(args.repeats):
        poison(dst, n)
        alone.append(timed(s.submit_load, keys[:n], range(dst, dst + n), "load (alone)")[1])
        poison(dst, n)
        fresh = [rng.randbytes(32) for _ in range(n)]
        t0 = time.perf_counter()
        store = s.submit_store(ns, reg, fresh, range(0, n))  # Reads blocks the load never writes.
        t1 = time.perf_counter()
        load = s.submit_load(ns, reg, keys[:n], range(dst, dst + n))
        t2 = time.perf_counter()
        done(load, "load during a store")
        with_store.append(time.perf_counter() - t1)
        subs.append(t2 - t1)
        done(store, "store during a load")
        store_jobs.append(time.perf_counter() - t0)
        if rep == 0 and not same(dst, 0, n):
            raise RuntimeError("load during a store: bytes differ from the stored ones")
        evict(fresh)
    base = make_row("nhd16", "load_alone", n * 16, n, n * bb, subs, alone, ceil, None)
    row = make_row("nhd16", "load_during_store", n * 16, n, n * bb, subs, with_store, ceil, None)
    row.update(alone_job_ms_p50=base["job_ms_p50"], store_job_ms_p50=statistics.median(store_jobs) * 1e3,
               slowdown_vs_alone=row["job_ms_p50"] / base["job_ms_p50"])
    base["submit_us_p50"] = base["submit_us_p99"] = None  # Not timed separately there.
    for r in (base, row):
        print_row(r)
    return [base, row]


# ---------------------------------------------------------------------- output


HEADER = (f"{'layout':<12}{'op':<18}{'tokens':>7}{'blocks':>7}{'MiB':>7}{'submit us p50/p99':>19}"
          f"{'job ms p50/p99':>17}{'daemon ms':>17}{'GB/s':>7}{'%ceil':>7}  checks")


def print_row(r: Dict[str, Any]) -> None:
    sub = ("-" if r["submit_us_p50"] is None
           else f"{r['submit_us_p50']:.0f}/{r['submit_us_p99']:.0f}")
    checks = " ".join(f"{k}:{'PASS' if ok else 'FAIL'}" for k, ok in r["checks"].items())
    if "slowdown_vs_alone" in r:
        checks = f"x{r['slowdown_vs_alone']:.2f} vs alone (store job {r['store_job_ms_p50']:.1f} ms)"
    dmn = (f"{r['daemon_ms_p50']:.2f}/{r['daemon_ms_p99']:.2f}" if "daemon_ms_p50" in r else "-")
    print(f"{r['layout']:<12}{r['op']:<18}{r['tokens']:>7}{r['blocks']:>7}{r['bytes'] / 2**20:>7.0f}"
          f"{sub:>19}{r['job_ms_p50']:>9.2f}/{r['job_ms_p99']:<7.2f}{dmn:>17}{r['gbps_p50']:>7.1f}"
          f"{r['pct_ceiling']:>6.0f}%  {checks}", flush=True)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="layouts: " + ", ".join(LAYOUTS))
    ap.add_argument("--out", help="JSON file for every row")
    ap.add_argument("--endpoint", help="a running kvstratad (default: start one)")
    ap.add_argument("--l1", default="20GiB", help="L1 capacity of the started daemon")
    ap.add_argument("--layouts", default="all", help="comma-separated, default all: " + ",".join(LAYOUTS))
    ap.add_argument("--sizes", default="1024,8192,32768", help="tokens per request, comma-separated")
    ap.add_argument("--repeats", type=int, default=20, help="timed jobs per layout, size and op")
    ap.add_argument("--warmup", type=int, default=1, help="untimed jobs before each size")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                    help="config override of the started daemon, e.g. gpu.copy_streams=1")
    ap.add_argument("--stages", action="store_true",
                    help="run the daemon at log.level=debug and report its per-stage load "
                    "hand-over times (job_accepted: pin_us, engine_us)")
    ap.add_argument("--timeline", action="store_true", help="--stages, and each timed job's "
                    "daemon stages beside the client's clock (daemon_stages.timeline)")
    ap.add_argument("--descending-stores", action="store_true",
                    help="store jobs name their blocks in descending id order (as vLLM hands "
                    "out a request's blocks once it has freed others: tail first)")
    ap.add_argument("--completions", choices=("socket", "stream"), default="socket",
                    help="stream: send version-1 job frames, whose completions come over "
                    "WatchCompletions (as before the daemon offered socket_completions)")
    ap.add_argument("--no-overlap", dest="overlap", action="store_false",
                    help="skip the nhd16 8K load-during-store run")
    args = ap.parse_args(argv)
    sizes = [int(t) for t in args.sizes.split(",")]
    names = list(LAYOUTS) if args.layouts == "all" else [n.strip() for n in args.layouts.split(",")]
    unknown = [n for n in names if n not in LAYOUTS and n not in SKIPPED]
    if unknown:
        ap.error(f"unknown layouts {unknown}; choose from {', '.join(LAYOUTS)}")

    import torch

    if not torch.cuda.is_available():
        print("no CUDA device: benchmark skipped", flush=True)
        return 2
    result: Dict[str, Any] = {
        "benchmark": "kvstrata engine jobs: one SubmitLoad / SubmitStore per request",
        "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "sizes_tokens": sizes,
        "repeats": args.repeats, "warmup": args.warmup, "targets": TARGETS,
        "daemon_settings": args.set,
        "percentiles": "p50 = median; p99 = nearest rank (the max of fewer than 100 runs)",
        "layouts": {n: {"status": "skipped", "reason": r} for n, r in SKIPPED.items()
                    if args.layouts == "all" or n in names},
        "rows": []}
    for n, r in result["layouts"].items():
        log(f"{n}: skipped: {r['reason']}")
    names = [n for n in names if n in LAYOUTS]
    ceil = result["ceilings"] = measure_ceilings()
    log("ceilings (GB/s): " + ", ".join(f"{k[:-5]} {v:.1f}" for k, v in ceil.items()))

    import kvstrata

    daemon, endpoint, failed = None, args.endpoint, False
    try:
        if endpoint is None:
            settings = dict(kv.split("=", 1) for kv in args.set)
            if args.stages or args.timeline:
                settings["log.level"] = "debug"
            if args.timeline:
                settings["log.format"] = "json"
            daemon = load_latency.start_daemon(args.l1, settings)
            endpoint = daemon.endpoint
        pid = daemon.proc.pid if daemon is not None else None
        with kvstrata.Session(endpoint=endpoint, client_name="bench-engine-jobs", timeout=60.0) as s:
            if args.completions == "stream":  # What a client of an older daemon does.
                s.open_response.socket_completions = False
            result["completions"] = ("socket" if s.open_response.socket_completions
                                     else "stream")
            if args.timeline:
                TIMELINE.watch(s)
            log(f"job completions come over the {result['completions']}")
            result["floors"] = floors = measure_floors(s)
            if getattr(s.open_response, "packed_transfers", False):
                floors.update(measure_submit_parts(s))
                log(f"512-block submit parts: client prep {floors['client_prep_us_p50']:.0f} us, "
                    f"a job frame refused at the registration check "
                    f"{floors['refused_submit_us_p50']:.0f} us waiting for the answer, "
                    f"{floors['session_submit_us_p50']:.0f} us through submit_load (p50)")
            log(f"floors: gRPC round trip (Heartbeat) p50 {floors['heartbeat_us_p50']:.0f} us, "
                f"p99 {floors['heartbeat_us_p99']:.0f} us")
            print("targets: 8K load p50 >= 90% H2D ceiling; load p99 <= 1.2 x p50; 1K load <= 1.3 x "
                  "bytes / 128 MiB H2D ceiling; submit p50 <= 300 us (<= 512 blocks); stores >= 8K "
                  "tokens >= 85% D2H ceiling", flush=True)
            print(HEADER, flush=True)
            for name in names:
                try:
                    info, rows = run_layout(s, name, sizes, args, ceil, pid)
                except Exception as err:  # Keep going with the next layout.
                    failed = True
                    info, rows = {"status": "error", "reason": f"{type(err).__name__}: {err}"}, []
                    if daemon is not None and not daemon.running():
                        info["daemon_log_tail"] = daemon.log_tail()
                if info["status"] != "ok":
                    log(f"{name}: {info['status']}: {info['reason']}")
                result["layouts"][name] = info
                result["rows"].extend(rows)
                gc.collect()
                torch.cuda.empty_cache()
            result["daemon_rpc_us_mean"] = rpc_means(s.client)
            log("daemon time per call (mean, kvstrata_rpc_duration_seconds): " + ", ".join(
                f"{k} {v:.0f} us" for k, v in result["daemon_rpc_us_mean"].items()))
    except (SystemExit, Exception) as err:
        failed = True
        result["error"] = f"{type(err).__name__}: {err}"
        if daemon is not None:
            result["daemon_log_tail"] = daemon.log_tail()
        print(f"benchmark failed: {result['error']}", file=sys.stderr, flush=True)
    finally:
        if daemon is not None:
            if args.stages or args.timeline:
                result.update(report_stages(daemon.log_path, log, TIMELINE if args.timeline else None))
            result["gpu_copy_choice"] = re.findall(
                r"gpu_copy_choice (.*)", Path(daemon.log_path).read_text(errors="replace"))
            for line in result["gpu_copy_choice"]:
                log(f"daemon's copy choice: {line}")
            load_latency.stop_daemon(daemon)
    print(f"\nceilings: H2D {ceil['h2d_1GiB_gbps']:.1f} GB/s at 1 GiB, {ceil['h2d_128MiB_gbps']:.1f} "
          f"at 128 MiB (the 1K-token target: 1.3 x bytes / that); D2H {ceil['d2h_1GiB_gbps']:.1f} "
          f"at 1 GiB, {ceil['d2h_128MiB_gbps']:.1f} at 128 MiB. p99 of {args.repeats} runs = max.")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
        log(f"wrote {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
