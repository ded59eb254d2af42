"""KVStrataStorage (kvstrata_sglang) throughput and latency against a real kvstratad.

batch_set_v1 and batch_get_v1 of 64 pages of 64 tokens between SGLang's real host KV pool
(MHA/MLATokenToKVPoolHost, CPU) and the daemon's L1, printed beside a plain single-thread
memcpy (ctypes.memmove) of the same bytes between two warm buffers, measured in the same
run, interleaved with the calls (target: >= 70% of it; two baselines: buffers with 4 KiB
pages like SGLang's host pool and the daemon's region -- the target's -- and numpy's
transparent-huge-page buffers); batch_exists latency for 128 keys (lookup fast path,
and gRPC) beside the client's raw Lookup RPC of the same 128 keys.

    .venv-sglang/bin/python bench/sglang/storage_bench.py [--reps 25] [--layouts mha:page_first,mla:page_first]

Geometry (default): MHA 8 layers, 8 KV heads, head size 128, bf16 -> 2 MiB per page,
128 MiB per batch of 64 pages; MLA as DeepSeek-V3 (61 layers, latent 512 + rope 64, bf16)
-> 4.3 MiB per page, 275 MiB per batch. The daemon: L1 1 GiB, L2 off; KVSTRATA_DAEMON
picks the binary. Exits 2 when a figure misses the target.
"""
from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "integration" / "python"))  # kvs_testing.Daemon
sys.path.insert(0, str(REPO / "tests" / "integration" / "sglang"))  # SGLang's real pools

import numpy as np  # noqa: E402
import torch  # noqa: E402

import kvstrata_sglang  # noqa: E402
from kvstrata import stream_copy  # noqa: E402
import sglang_pools as sp  # noqa: E402
from kvs_testing import Daemon, short_tmpdir  # noqa: E402

PAGES, PAGE_TOKENS, EXISTS_KEYS = 64, 64, 128


L1_BYTES = 1 << 30


class Memcpy:
    """A baseline: one single-thread memmove of the same bytes between two warm buffers.

    "torch": two torch CPU tensors, allocated as SGLang allocates its host pool (4 KiB
    pages; the daemon's memfd region has 4 KiB pages too on this VM). "numpy": two numpy
    arrays, which numpy backs with transparent huge pages: the fastest plain memcpy here.
    """

    def __init__(self, nbytes: int, kind: str) -> None:
        self.nbytes = nbytes
        if kind == "numpy":
            self.src = np.random.default_rng(0).integers(0, 256, nbytes, dtype=np.uint8)
            self.dst = np.ones(nbytes, dtype=np.uint8)  # touched: warm
            self.s, self.d = self.src.ctypes.data, self.dst.ctypes.data
        else:
            self.src = torch.randint(0, 256, (nbytes,), dtype=torch.uint8)
            self.dst = torch.ones(nbytes, dtype=torch.uint8)
            self.s, self.d = self.src.data_ptr(), self.dst.data_ptr()
        self.run()

    def run(self) -> float:
        t0 = time.perf_counter()
        ctypes.memmove(self.d, self.s, self.nbytes)
        return time.perf_counter() - t0


def bench_layout(endpoint: str, kind: str, layout: str, reps: int, args) -> dict:
    """Each repetition times the baseline memcpy, batch_set_v1 of 64 new pages and
    batch_get_v1 of them, back to back (so load on the machine hits all three alike)."""
    layers = args.mla_layers if kind == "mla" else args.layers
    pool = sp.make_pool(kind, layout, pages=2 * PAGES, layers=layers, heads=args.heads,
                        head_dim=args.head_dim, page=PAGE_TOKENS)
    cfg = sp.make_config({"salt": f"bench-{layout}", "timeout_s": 30.0,
                          "copy_threads": args.copy_threads}, mla=kind == "mla",
                         endpoint=endpoint, metrics=False)
    b = kvstrata_sglang.KVStrataStorage(cfg, {})
    b.register_mem_pool_host(pool)
    src = sp.alloc_pages(pool, PAGES)
    dst = sp.alloc_pages(pool, PAGES)
    sp.fill_pages(pool, src, 1)
    nbytes = PAGES * b.layout.bytes_per_page
    bases = {"memcpy": Memcpy(nbytes, "torch"), "memcpy_thp": Memcpy(nbytes, "numpy")}
    # Warm-up: fill L1 once, so every measured store reuses (evicts) warm slots, as a
    # long-running server does.
    for r in range(L1_BYTES // nbytes + 2):
        assert b.batch_set_v1(sp.keys_for(f"{layout}-warm-{r}", PAGES), src) == [True] * PAGES
    times = {"memcpy": [], "memcpy_thp": [], "set": [], "get": []}
    for r in range(reps):
        keys = sp.keys_for(f"{layout}-{r}", PAGES)
        for name, base in bases.items():
            times[name].append(base.run())
        t0 = time.perf_counter()
        ok = b.batch_set_v1(keys, src)
        times["set"].append(time.perf_counter() - t0)
        assert all(ok), ok
        t0 = time.perf_counter()
        ok = b.batch_get_v1(keys, dst)
        times["get"].append(time.perf_counter() - t0)
        assert all(ok), ok
    assert sp.page_bytes(pool, dst) == sp.page_bytes(pool, src), "bytes differ"
    b.close()
    gbps = {k: nbytes / statistics.median(v) / 1e9 for k, v in times.items()}
    ratio = {(k, m): statistics.median(a / t for a, t in zip(times[m], times[k]))
             for k in ("set", "get") for m in ("memcpy", "memcpy_thp")}
    return dict(nbytes=nbytes, segments=b.layout.segments_per_page, gbps=gbps, ratio=ratio)


def bench_exists(endpoint: str, calls: int) -> dict:
    pool = sp.make_pool("mha", "page_first", pages=4, page=PAGE_TOKENS)
    b = kvstrata_sglang.KVStrataStorage(
        sp.make_config({"salt": "bench-exists"}, endpoint=endpoint, metrics=False), {})
    b.register_mem_pool_host(pool)
    idx = sp.alloc_pages(pool, 1)
    keys = sp.keys_for("exists", EXISTS_KEYS)
    for i in range(EXISTS_KEYS):  # all 128 present: the lookup walks the whole chain
        assert b.batch_set_v1(keys[i:i + 1], idx) == [True]
    session, ns = b.session, b.namespace
    raw_keys = kvstrata_sglang.page_keys(keys)

    def lat(fn):
        for _ in range(50):
            fn()
        out = []
        for _ in range(calls):
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
        out.sort()
        return out[len(out) // 2] * 1e6, out[int(len(out) * 0.99)] * 1e6

    grpc_b = kvstrata_sglang.KVStrataStorage(sp.make_config(
        {"salt": "bench-exists", "fast_lookup": False}, endpoint=endpoint, metrics=False), {})
    grpc_b.register_mem_pool_host(pool)
    assert b.batch_exists(keys) == EXISTS_KEYS == grpc_b.batch_exists(keys)
    raw = lat(lambda: session.lookup(ns, raw_keys))
    conn = lat(lambda: b.batch_exists(keys))
    conn_grpc = lat(lambda: grpc_b.batch_exists(keys))
    assert b.counters["exists_fast"] > calls
    b.close()
    grpc_b.close()
    return dict(raw=raw, conn=conn, conn_grpc=conn_grpc)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=25)
    ap.add_argument("--layouts", default="mha:page_first,mha:page_first_direct,"
                                          "mha:layer_first,mla:page_first")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--mla-layers", type=int, default=61)  # DeepSeek-V3: 61 layers x 576
    ap.add_argument("--exists-calls", type=int, default=2000)
    ap.add_argument("--target", type=float, default=0.70)
    ap.add_argument("--copy-threads", type=int, default=1)
    args = ap.parse_args()

    workdir = short_tmpdir()
    daemon = Daemon(workdir, {"l1.capacity": str(L1_BYTES >> 20) + "MiB"})
    daemon.start_timeout_s = 60
    daemon.start()
    status = 0
    try:
        print(f"kvstrata_sglang storage bench: {PAGES} pages x {PAGE_TOKENS} tokens; MHA "
              f"{args.layers} layers x {args.heads} KV heads x {args.head_dim}, MLA "
              f"{args.mla_layers} layers x 576; bf16; {args.reps} repetitions: median GB/s, "
              f"% = median of per-repetition ratios; torch {torch.__version__}; page copies: "
              f"{'streaming stores (libkvstrata_copy.so)' if stream_copy.NATIVE else 'memmove'}")
        print("| pool | layout | pieces/page | MiB | memcpy GB/s (4 KiB pages / THP) | "
              "batch_set_v1 GB/s | set % of memcpy (4 KiB / THP) | batch_get_v1 GB/s | "
              "get % of memcpy (4 KiB / THP) |")
        print("|---|---|---|---|---|---|---|---|---|")
        for item in args.layouts.split(","):
            kind, layout = item.split(":")
            r = bench_layout(daemon.endpoint, kind, layout, args.reps, args)
            g, q = r["gbps"], r["ratio"]
            cells = []
            for op in ("set", "get"):
                met = q[(op, "memcpy")] >= args.target
                status = status if met else 2
                cells.append(f"{g[op]:.2f} | {q[(op, 'memcpy')]:.0%} "
                             f"{'PASS' if met else 'FAIL'} / {q[(op, 'memcpy_thp')]:.0%}")
            print(f"| {kind.upper()} | {layout} | {r['segments']} | {r['nbytes'] >> 20} | "
                  f"{g['memcpy']:.2f} / {g['memcpy_thp']:.2f} | {cells[0]} | {cells[1]} |")
        e = bench_exists(daemon.endpoint, args.exists_calls)
        print()
        print(f"batch_exists latency, {EXISTS_KEYS} keys all present, {args.exists_calls} "
              "calls each:")
        print("| call | median us | p99 us |")
        print("|---|---|---|")
        print(f"| baseline: Session.lookup (gRPC) of the same 128 raw keys | {e['raw'][0]:.0f} | "
              f"{e['raw'][1]:.0f} |")
        print(f"| batch_exists (lookup fast path, the default) | {e['conn'][0]:.0f} | "
              f"{e['conn'][1]:.0f} |")
        print(f"| batch_exists with fast_lookup off (gRPC) | {e['conn_grpc'][0]:.0f} | "
              f"{e['conn_grpc'][1]:.0f} |")
    finally:
        daemon.stop()
        daemon.kill()
    return status


if __name__ == "__main__":
    sys.exit(main())
