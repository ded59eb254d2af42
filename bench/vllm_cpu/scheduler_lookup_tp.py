#!/usr/bin/env python3
"""A 1,000-unit lookup from vLLM's scheduler code path at tensor parallel 1, 2, 4, 8.

    KVSTRATA_DAEMON=build/daemon/server/kvstratad .venv-vllm/bin/python \\
        bench/vllm_cpu/scheduler_lookup_tp.py [--calls 300] [--connector DIR] [--out FILE]

KVStrataConnector in vLLM's SCHEDULER role (vLLM's real config objects, a tiny model,
load planner off) on a real kvstratad over its Unix socket. Every rank's namespace holds
the request's 1,000 units (opaque blocks stored from a separate session), and the
scheduler answers `get_num_new_matched_tokens` for a fresh request state each call (its
lookup, the leases it takes, the answer), timed per call; the leases are released after
each call outside the timed part. The daemon's own counters give the lookup round trips
per call (kvstrata_rpc_requests_total of FastPath.Lookup and Control.Lookup). Issue 44's target: one round trip whatever the TP, p50
at TP=8 <= 1.2x the TP=1 figure. --connector DIR puts another kvstrata_vllm first on the
path (an older commit's connector_vllm/) for a same-run before/after.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

REPO = Path(__file__).resolve().parents[2]
UNITS = 1000


def run_tp(tp: int, d, model: str, calls: int) -> Dict[str, float]:
    import kvstrata  # noqa: PLC0415
    from harness import BLOCK, kv_cache_config, vllm_config  # noqa: PLC0415
    from kvstrata_vllm import KVStrataConnector  # noqa: PLC0415
    from prom_text import scrape  # noqa: PLC0415
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole  # noqa
    from vllm.sampling_params import SamplingParams  # noqa: PLC0415
    from vllm.utils.hashing import sha256  # noqa: PLC0415
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher  # noqa: PLC0415
    from vllm.v1.request import Request  # noqa: PLC0415

    tokens = UNITS * BLOCK + 1
    cfg = vllm_config(model, {"endpoint": d.endpoint, "load_planner": "off"}, tp=tp,
                      max_model_len=tokens + 16, batch_tokens=tokens + 16)
    conn = KVStrataConnector(cfg, KVConnectorRole.SCHEDULER, kv_cache_config(UNITS + 64))
    side = conn.scheduler
    sp = SamplingParams(max_tokens=1, temperature=0.0)
    prompt = [100 + (i * 7919 + tp) % 800 for i in range(tokens)]
    req = Request(request_id=f"tp{tp}", prompt_token_ids=prompt, sampling_params=sp,
                  pooling_params=None, block_hasher=get_request_block_hasher(BLOCK, sha256))
    keys = side._keys(req.block_hashes, 0, UNITS)
    with kvstrata.Session(endpoint=d.endpoint) as filler:
        for f in side.fields.values():
            ns = filler.register_namespace(**f)
            block = bytes(ns.bytes_per_block)
            for i in range(0, UNITS, 250):
                stored = filler.store(ns, keys[i:i + 250], [block] * len(keys[i:i + 250]))
                assert stored.stored == len(keys[i:i + 250]), stored

    def lookups() -> float:
        """Lookup round trips so far: fast-path lookup frames and gRPC Lookup calls."""
        with d.client(timeout=10.0) as c:
            m = scrape(c.get_status().metrics_address)
        return sum(v for (name, labels), v in m.samples.items()
                   if name == "kvstrata_rpc_requests_total" and
                   dict(labels).get("method") in ("FastPath.Lookup", "Control.Lookup"))

    s = side.link.session()
    out: List[float] = []
    before = 0.0
    for i in range(-30, calls):
        if i == 0:
            before = lookups()
        t0 = time.perf_counter_ns()
        matched, _ = conn.get_num_new_matched_tokens(req, 0)
        dt = (time.perf_counter_ns() - t0) / 1e3
        assert matched == UNITS * BLOCK, matched
        st = side._reqs.pop(req.request_id)
        for _, lease_id in getattr(st, "leases", []):
            s.release_lease(lease_id)
        if i >= 0:
            out.append(dt)
    per_call = (lookups() - before) / calls
    conn.shutdown()
    out.sort()
    return {"tp": tp, "p50_us": out[len(out) // 2], "p90_us": out[int(0.9 * (len(out) - 1))],
            "p99_us": out[int(0.99 * (len(out) - 1))], "round_trips_per_call": per_call}


def session_rows(d, calls: int) -> List[Dict[str, float]]:
    """The same 1,000-key chain through Session.lookup_namespaces alone (no scheduler), over
    1, 2, 4, 8 namespaces, without and with leases: what each namespace adds in the daemon."""
    import kvstrata  # noqa: PLC0415
    from kvs_testing import mha_spec  # noqa: PLC0415

    rows = []
    with kvstrata.Session(endpoint=d.endpoint) as s:
        spaces = [s.register_namespace(**mha_spec(model="kvstrata-bench/tp-lookup", tp_size=8,
                                                  tp_rank=r, num_layers=1, head_size=16))
                  for r in range(8)]
        keys = [os.urandom(32) for _ in range(UNITS)]
        for ns in spaces:
            for i in range(0, UNITS, 250):
                s.store(ns, keys[i:i + 250], [bytes(ns.bytes_per_block)] * 250)
        for n in (1, 2, 4, 8):
            for lease in (False, True):
                out = []
                for i in range(-20, calls):
                    t0 = time.perf_counter_ns()
                    r = s.lookup_namespaces(spaces[:n], keys, lease=lease)
                    dt = (time.perf_counter_ns() - t0) / 1e3
                    assert r.hit_blocks == UNITS and r.round_trips == 1, r
                    if lease:
                        s.release_leases(r.lease_ids)
                    if i >= 0:
                        out.append(dt)
                out.sort()
                rows.append({"namespaces": n, "lease": lease, "p50_us": out[len(out) // 2]})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--tp", default="1,2,4,8")
    ap.add_argument("--connector", default="")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    if args.connector:
        sys.path.insert(0, str(Path(args.connector).resolve()))
    sys.path.insert(0, str(REPO / "tests" / "e2e" / "vllm"))
    sys.path.insert(0, str(REPO / "tests" / "integration" / "python"))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from kvs_testing import Daemon, short_tmpdir  # noqa: PLC0415
    from tiny_model import make_tiny_model  # noqa: PLC0415
    import kvstrata_vllm  # noqa: PLC0415

    model = make_tiny_model(Path(tempfile.mkdtemp(prefix="slt-model-")), heads=8, kv_heads=8,
                            max_len=UNITS * 16 + 64)
    d = Daemon(short_tmpdir(), {"l1.capacity": "2GiB"}).start()
    rows = []
    try:
        for tp in [int(t) for t in args.tp.split(",")]:
            rows.append(run_tp(tp, d, str(model), args.calls))
        plain = session_rows(d, args.calls) if hasattr(kvstrata_vllm, "__file__") and \
            hasattr(__import__("kvstrata"), "NamespacesLookup") else []
    finally:
        d.stop()
    print(f"connector {Path(kvstrata_vllm.__file__).parent}, {UNITS}-unit lookup, "
          f"{args.calls} calls per TP, vLLM scheduler role, load planner off")
    print(f"{'TP':>3} {'p50 us':>9} {'p90 us':>9} {'p99 us':>9} {'trips/call':>13} {'p50/TP1':>8}")
    base = rows[0]["p50_us"]
    for r in rows:
        print(f"{r['tp']:>3} {r['p50_us']:9.1f} {r['p90_us']:9.1f} {r['p99_us']:9.1f} "
              f"{r['round_trips_per_call']:13.2f} {r['p50_us'] / base:8.2f}")
    last = rows[-1]
    print(f"target: one round trip whatever the TP, p50 at TP={last['tp']} <= 1.2x TP=1: "
          f"{'PASS' if last['p50_us'] <= 1.2 * base and last['round_trips_per_call'] <= 1.0 else 'MISS'}"
          f" ({last['p50_us'] / base:.2f}x, {last['round_trips_per_call']:.2f} round trips per call)")
    if plain:
        print("Session.lookup_namespaces alone, the same chain, p50 us (one round trip):")
        print(f"{'namespaces':>10} {'no lease':>9} {'leases':>9}")
        for n in (1, 2, 4, 8):
            a, b = [r["p50_us"] for r in plain if r["namespaces"] == n]
            print(f"{n:>10} {a:9.1f} {b:9.1f}")
    if args.out:
        Path(args.out).write_text(json.dumps({"scheduler": rows, "session": plain}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
