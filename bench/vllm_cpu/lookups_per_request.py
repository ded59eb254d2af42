#!/usr/bin/env python3
"""Daemon lookups per request in a multi-turn workload, through vLLM's real scheduler (CPU).

    KVSTRATA_DAEMON=build/daemon/server/kvstratad .venv-vllm/bin/python \\
        bench/vllm_cpu/lookups_per_request.py [--connector DIR] [--out FILE]

vLLM's real Scheduler with KVStrataConnector on both sides (tests/e2e/vllm/harness.py: a
tiny model, CPU KV tensors, a fake forward pass) serves conversations of several turns,
several at a time, on a GPU KV cache too small for all of them, so requests wait for
blocks and vLLM asks the connector again every step. The daemon's own counters
(kvstrata_lookups_total, kvstrata_lookup_blocks_total) give the lookups and the keys asked
per request. --connector DIR puts another kvstrata_vllm first on the path (e.g. an older
commit's connector_vllm/, `git worktree add /tmp/old <commit>`): the A/B of issue 44's
target, "≤ 2 daemon lookups per request", in one run of each.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
from pathlib import Path
from typing import Dict, List

REPO = Path(__file__).resolve().parents[2]


def run(args: argparse.Namespace) -> Dict[str, float]:
    if args.connector:
        sys.path.insert(0, str(Path(args.connector).resolve()))
    sys.path.insert(0, str(REPO / "tests" / "e2e" / "vllm"))
    sys.path.insert(0, str(REPO / "tests" / "integration" / "python"))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from harness import Engine  # noqa: PLC0415
    from kvs_testing import Daemon, short_tmpdir  # noqa: PLC0415
    from prom_text import scrape  # noqa: PLC0415
    from tiny_model import make_tiny_model  # noqa: PLC0415
    import kvstrata_vllm  # noqa: PLC0415

    model = make_tiny_model(Path(tempfile.mkdtemp(prefix="lpr-model-")))
    d = Daemon(short_tmpdir()).start()
    try:
        def counters() -> Dict[str, float]:
            with d.client(timeout=10.0) as c:
                m = scrape(c.get_status().metrics_address)
            return {"lookups": m.value("kvstrata_lookups_total"),
                    "keys": m.value("kvstrata_lookup_blocks_total")}

        e = Engine(str(model), {"endpoint": d.endpoint}, num_blocks=args.gpu_blocks,
                   batch_tokens=args.batch_tokens)
        rng = random.Random(args.seed)
        system = [rng.randrange(100, 900) for _ in range(args.system_tokens)]
        convs = [system + [rng.randrange(100, 900) for _ in range(args.user_tokens)]
                 for _ in range(args.conversations)]
        turns = [0] * args.conversations
        running: Dict[str, int] = {}
        requests = 0
        before = counters()
        for _ in range(100_000):
            while len(running) < args.in_flight:
                waiting = [i for i in range(args.conversations)
                           if turns[i] < args.turns and i not in running.values()]
                if not waiting:
                    break
                i = waiting[0]
                r = e.add(convs[i], max_tokens=args.answer_tokens)
                running[r.request_id] = i
                requests += 1
            if not running:
                break
            e.step()
            for req_id in [r for r in running if r in e.finished]:
                i = running.pop(req_id)
                turns[i] += 1
                convs[i] = convs[i] + e.outputs[req_id] + \
                    [rng.randrange(100, 900) for _ in range(args.user_tokens)]
        e.drain_stores()
        after = counters()
    finally:
        d.stop()
    lookups, keys = after["lookups"] - before["lookups"], after["keys"] - before["keys"]
    return {"connector": str(Path(kvstrata_vllm.__file__).parent), "requests": requests,
            "daemon_lookups": lookups, "lookups_per_request": round(lookups / requests, 2),
            "keys_per_request": round(keys / requests, 1),
            "lookup_reused": e.stats.get("lookup_reused", 0),
            "hit_tokens": e.stats.get("hit_tokens", 0)}


def main(argv: List[str] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--connector", help="a connector_vllm/ directory to use instead")
    ap.add_argument("--conversations", type=int, default=16)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--in-flight", type=int, default=8)
    ap.add_argument("--system-tokens", type=int, default=128)
    ap.add_argument("--user-tokens", type=int, default=48)
    ap.add_argument("--answer-tokens", type=int, default=8)
    ap.add_argument("--gpu-blocks", type=int, default=96, help="vLLM's KV blocks of 16 tokens")
    ap.add_argument("--batch-tokens", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", help="JSON result")
    args = ap.parse_args(argv)
    result = run(args)
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
