#!/usr/bin/env python3
"""What L3 keeps when engines store faster than the mount takes files (issue 17): the
write-down's backlog_policy "defer" (a block stored while the write queue is at least half
full waits for its first L1 hit) against "drop" (every store queued until the queue is
full), in the same run, on the GlusterFS fixture (tests/integration/python/gluster_fixture.py).

One daemon on mount 0 is offered R requests of 100 blocks each as fast as it takes them
(~10x the mount's file rate); every 4th request is *reused*: its blocks are looked up again
(L1 hits) two requests later, as a shared prefix would be. Once the write queue is empty,
the bench counts the reused and the other blocks whose files are in the directory, and the
daemon's written / dropped / shed counters. Target: the reused blocks land in L3, which a
queue that drops at the tail cannot promise.

Needs root, /dev/fuse, `ip netns` and GlusterFS (scripts/setup_gluster.sh). Not CI.

    .venv/bin/python bench/tiers/l3_shedding.py [--requests 40] [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "integration" / "python"))
os.environ.setdefault("KVSTRATA_DAEMON", str(REPO / "build" / "daemon" / "server" / "kvstratad"))

from gluster_fixture import GlusterCluster, unavailable_reason  # noqa: E402
from gluster_l3 import SharedDir, gl_settings, l3, wait_l3_idle  # noqa: E402
from host_child import chain_keys  # noqa: E402
from kvs_testing import short_tmpdir  # noqa: E402
from tier_helpers import Node, blocks, fresh_salt  # noqa: E402

PER_REQUEST = 100


def run(vol, work: Path, policy: str, requests: int) -> dict:
    shared = SharedDir(vol, f"shed-{policy}")
    salt = fresh_salt(f"shed-{policy}")
    chains = [chain_keys(f"shed-{policy}-{r}", PER_REQUEST) for r in range(requests)]
    reused = {r for r in range(requests) if r % 4 == 0}
    node = Node(work, gl_settings(shared.roots[0], **{"l1.capacity": "1GiB",
                                                       "l3.backlog_policy": policy}), salt, "a")
    try:
        t = time.monotonic()
        for r, keys in enumerate(chains):
            node.session.store(node.ns, keys, blocks(r, PER_REQUEST))
            if r >= 2 and r - 2 in reused:  # the shared prefix comes back
                assert node.session.lookup(node.ns, chains[r - 2]).hit_blocks == PER_REQUEST
        offer_s = time.monotonic() - t
        assert wait_l3_idle(node, 900)
        secs = time.monotonic() - t
        st = l3(node)
        on_disk = {p.stem for p in shared.block_files(0)}
        landed = {r: sum(k.hex() in on_disk for k in keys) for r, keys in enumerate(chains)}
        got_reused = sum(landed[r] for r in reused)
        got_other = sum(v for r, v in landed.items() if r not in reused)
        n_reused = PER_REQUEST * len(reused)
        n_other = PER_REQUEST * (requests - len(reused))
        out = dict(policy=policy, offered=PER_REQUEST * requests, offer_seconds=offer_s,
                   seconds=secs, written=st.written_blocks, dropped=st.dropped_writes,
                   shed_or_waiting=st.shed_writes + st.deferred_writes,
                   reused_on_disk=got_reused, reused=n_reused, other_on_disk=got_other,
                   other=n_other, on_disk_by_request=[landed[r] for r in range(requests)])
        print(f"{policy:>6}: offered {PER_REQUEST * requests} blocks in {offer_s:.1f} s; L3 "
              f"wrote {st.written_blocks} in {secs:.1f} s ({st.written_blocks / secs:.0f} "
              f"files/s); dropped {st.dropped_writes}, shed or still waiting "
              f"{st.shed_writes + st.deferred_writes}; on disk: reused {got_reused} of "
              f"{n_reused} ({100 * got_reused / n_reused:.0f}%), others {got_other} of "
              f"{n_other} ({100 * got_other / n_other:.0f}%)", flush=True)
        return out
    finally:
        node.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--out", type=Path, help="directory for shedding.json")
    args = ap.parse_args()
    reason = unavailable_reason()
    if reason:
        print(f"l3_shedding: cannot run here: {reason}")
        return 2
    print(f"machine: {os.cpu_count()} CPUs; kvstratad {os.environ['KVSTRATA_DAEMON']}; "
          f"{args.requests} requests of {PER_REQUEST} blocks, every 4th reused", flush=True)
    work = short_tmpdir()
    results = []
    try:
        with GlusterCluster(short_tmpdir()) as gl:
            vol = gl.volume("shed", mounts=1)
            for policy in ("drop", "defer"):
                results.append(run(vol, work, policy, args.requests))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "shedding.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
