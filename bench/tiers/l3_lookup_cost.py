"""What a lookup of L3 blocks costs when every entry is past the shared tier's presence_ttl
(100 ms) and is probed again (issue 46 items 5-7): daemon A stores N blocks on the GlusterFS
fixture, daemon B (the other mount, following A's journal) looks up chains of `--chain`
keys of them, each lookup more than 100 ms after B last saw those blocks, and the
lookup's latency (p50/p99) and hits are printed. Run it once per daemon binary
(KVSTRATA_DAEMON) to compare.

    sudo KVSTRATA_DAEMON=build/daemon/server/kvstratad .venv/bin/python \\
        bench/tiers/l3_lookup_cost.py --chain 32 --lookups 64
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests/integration/python"))

from gluster_fixture import GlusterCluster  # noqa: E402
from gluster_l3 import SharedDir, gl_settings, store_in_batches, wait_l3_idle  # noqa: E402
from host_child import chain_keys  # noqa: E402
from kvs_testing import short_tmpdir  # noqa: E402
from tier_helpers import Node, blocks, fresh_salt  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chain", type=int, default=32)
    ap.add_argument("--lookups", type=int, default=64)
    args = ap.parse_args()
    total = args.chain * args.lookups
    with GlusterCluster(short_tmpdir()) as gl:
        shared = SharedDir(gl.volume("cost", mounts=2), "cost")
        work = short_tmpdir()
        salt, keys = fresh_salt("cost"), chain_keys("cost", total)
        a = Node(work, gl_settings(shared.roots[0]), salt, "a")
        b = Node(work, gl_settings(shared.roots[1]), salt, "b")
        try:
            assert store_in_batches(a, keys, blocks(5, total)) == total
            assert wait_l3_idle(a)
            time.sleep(3.0)  # B follows A's journal
            chains = [keys[i:i + args.chain] for i in range(0, total, args.chain)]
            for rnd in ("first", "again"):
                took, hits = [], []
                for c in chains:
                    t = time.perf_counter()
                    hits.append(b.session.lookup(b.ns, c).hit_blocks)
                    took.append((time.perf_counter() - t) * 1000)
                time.sleep(0.2)  # every entry past presence_ttl again
                took.sort()
                print(f"{rnd}: {len(chains)} lookups of {args.chain} keys: p50 "
                      f"{statistics.median(took):.2f} ms, p99 {took[int(len(took) * .99)]:.2f} ms,"
                      f" hits {sum(hits)}/{total}", flush=True)
        finally:
            b.close()
            a.close()


if __name__ == "__main__":
    main()
