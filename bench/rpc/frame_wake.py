#!/usr/bin/env python3
"""How long a fast-path frame takes after a pause: a 1-key Lookup from the Python client
(kvstrata.Session.lookup, over the daemon's fast-path socket) after the caller slept
`gap` ms, as an engine's next step follows its last one. Each gap's p50 / p90 round trip,
over --calls calls; the gap of 0 ms (calls back to back) is the baseline of the same run. The daemon's connection thread waits for the next frame; one that slept
through the whole gap wakes on a CPU in a deep idle state (FastPathServer::kWarmWindow).
Without a GPU. Run it once per daemon build, in turn, for an A/B on one machine:

    KVSTRATA_DAEMON=build/daemon/server/kvstratad python3 bench/rpc/frame_wake.py
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(1, str(REPO / "tests" / "integration" / "python"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gaps-ms", default="0,2,6,20,300")
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    import kvstrata
    from kvs_testing import Daemon, mha_spec

    daemon = Daemon(Path(tempfile.mkdtemp(prefix="kvfw", dir="/tmp"))).start()
    try:
        with kvstrata.Session(daemon.client(), client_name="frame-wake") as s:
            ns = s.register_namespace(**mha_spec(model="frame-wake"))
            keys = [os.urandom(32)]
            for _ in range(50):
                s.lookup(ns, keys)
            print(f"{os.environ.get('KVSTRATA_DAEMON', 'default daemon')}:")
            for gap in (float(g) for g in args.gaps_ms.split(",")):
                calls = args.calls if gap < 100 else max(20, args.calls // 10)
                rtt = []
                for _ in range(calls):
                    time.sleep(gap / 1e3)
                    t0 = time.perf_counter()
                    s.lookup(ns, keys)
                    rtt.append((time.perf_counter() - t0) * 1e6)
                rtt.sort()
                label = "no pause (baseline)" if gap == 0 else f"after {gap:5g} ms"
                print(f"  {label}: p50 {statistics.median(rtt):6.0f} us, "
                      f"p90 {rtt[int(0.9 * (len(rtt) - 1))]:6.0f} us (n={len(rtt)})")
    finally:
        daemon.stop()


if __name__ == "__main__":
    main()
