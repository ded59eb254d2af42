#!/usr/bin/env python3
"""A 1,000-key Lookup from the Python client (kvstrata.Session.lookup), as the vLLM
scheduler and SGLang's batch_exists make it, on a real kvstratad over its Unix socket:
p50/p99 over the lookup fast path (the default: binary frames on a persistent socket) and
over gRPC (fast_path off), beside the C++ client's fast-path figure for the same chain
measured in the same run (build/bench/rpc/lookup_latency ... fast). Target (issue 16):
Python fast-path p50 <= 200 us.

    .venv/bin/python bench/rpc/python_lookup.py [--calls 3000] [--daemon PATH]
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import List

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench" / "vllm_gpu"))  # daemon_ctl: one daemon launcher

import kvstrata  # noqa: E402
from daemon_ctl import DaemonCtl  # noqa: E402

CHAIN = 1000


def percentiles(us: List[float]) -> str:
    s = sorted(us)
    return f"p50 {s[len(s) // 2]:8.1f} us   p99 {s[int(0.99 * (len(s) - 1))]:8.1f} us"


def timed(session: kvstrata.Session, ns, keys: List[bytes], calls: int) -> List[float]:
    for _ in range(200):  # warm-up
        session.lookup(ns, keys)
    out = []
    for _ in range(calls):
        t0 = time.perf_counter_ns()
        r = session.lookup(ns, keys)
        out.append((time.perf_counter_ns() - t0) / 1e3)
        assert r.hit_blocks == len(keys), r
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--daemon", default=str(REPO / "build" / "daemon" / "server" / "kvstratad"))
    ap.add_argument("--cpp-bench", default=str(REPO / "build" / "bench" / "rpc" / "lookup_latency"))
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kvs-pylookup-", dir="/tmp"))
    daemon = DaemonCtl(args.daemon, str(work), {"l1.capacity": "256MiB", "l2.enabled": "false"})
    daemon.start()
    try:
        with kvstrata.Session(endpoint=daemon.endpoint) as session:
            ns = session.register_namespace(
                engine="other", model="kvstrata-bench/python-lookup", dtype="bfloat16",
                num_layers=4, num_kv_heads=2, head_size=64, tokens_per_block=16,
                kv_layout="vllm_nhd")
            keys = [i.to_bytes(4, "little") + os.urandom(28) for i in range(CHAIN)]
            block = bytes(ns.bytes_per_block)
            stored = session.store(ns, keys, [block] * CHAIN)
            assert stored.stored == CHAIN, stored
            fast = timed(session, ns, keys, args.calls)
            fast_ok = session.fast_path and session.lookup(ns, keys).fast
            session.fast_path = False
            grpc_us = timed(session, ns, keys, args.calls)
    finally:
        daemon.stop()
    print(f"kvstratad {args.daemon}, Unix socket, chain of {CHAIN} keys (32 bytes), "
          f"{args.calls} calls, 1 client, Python {sys.version.split()[0]}")
    print(f"  Python Session.lookup, fast path   {percentiles(fast)}"
          f"   {'(fast path answered)' if fast_ok else '(FAST PATH NOT USED)'}")
    print(f"  Python Session.lookup, gRPC        {percentiles(grpc_us)}")
    cpp = "n/a (no " + args.cpp_bench + ")"
    if Path(args.cpp_bench).is_file():
        p = subprocess.run([args.cpp_bench, str(args.calls), "fast"], capture_output=True,
                           text=True, timeout=600)
        m = re.search(r"fast path Lookup \(1000 keys\)\s+1\s+([\d.]+)\s+([\d.]+)", p.stdout)
        cpp = f"p50 {float(m.group(1)):8.1f} us   p99 {float(m.group(2)):8.1f} us" if m else \
            "n/a (unparsed output)"
    print(f"  C++ LookupClient, fast path        {cpp}")
    p50 = sorted(fast)[len(fast) // 2]
    print(f"target: Python fast-path p50 <= 200 us: {'PASS' if p50 <= 200 else 'MISS'} "
          f"({p50:.1f} us)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
