#!/usr/bin/env python3
"""Host-to-device copy ceilings of the benchmark's GPUs, measured before the engines start.

    python3 ceiling.py --devices 2 [--gib 1] [--repeats 5]     # one JSON object on stdout

Per device d < --devices: a pinned host tensor of --gib GiB copied to device d
(cudaMemcpyAsync via Tensor.copy_(non_blocking=True) on a stream of d's own, timed with CUDA
events), alone (the other devices idle) and then on every device at once (the copies issued
back to back on their devices' streams, so they run concurrently); the median of --repeats
rounds after one warm-up round. Alone: each device's ceiling; concurrently: each device's
share when every TP rank loads at the same time (what a TP engine's KVStrata loads do), and
the aggregate over the wall time of a round. run.py runs it in a process of its own (so no
CUDA context outlives it) under --tp > 1 and compares each rank's L1 load bandwidth with it.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any, Dict, List, Sequence, Tuple

GIB = 1 << 30


def gbps(nbytes: int, ms: float) -> float:
    return round(nbytes / 1e9 / (ms / 1e3), 2) if ms > 0 else 0.0


def measure(devices: int, nbytes: int = GIB, repeats: int = 5) -> Dict[str, Any]:
    import torch  # noqa: PLC0415 - on the GPU machine only

    # One pinned source per device (every rank copies data of its own); UVA makes pinned
    # memory portable to every device.
    srcs = [torch.empty(nbytes, dtype=torch.uint8, pin_memory=True) for _ in range(devices)]
    for s in srcs:
        s.fill_(1)  # fault the pages in before any timing
    dsts = [torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{d}") for d in range(devices)]
    streams = [torch.cuda.Stream(device=d) for d in range(devices)]

    def round_(ds: Sequence[int]) -> Tuple[Dict[int, float], float]:
        """The copies of devices ds issued at once; per device ms (its events), wall ms."""
        marks = []
        t0 = time.perf_counter()
        for d in ds:
            with torch.cuda.device(d):
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                with torch.cuda.stream(streams[d]):
                    start.record(streams[d])
                    dsts[d].copy_(srcs[d], non_blocking=True)
                    end.record(streams[d])
            marks.append((d, start, end))
        for _, _, end in marks:
            end.synchronize()
        wall = (time.perf_counter() - t0) * 1e3
        return {d: start.elapsed_time(end) for d, start, end in marks}, wall

    out: Dict[str, Any] = {"bytes": nbytes, "repeats": repeats, "devices": []}
    for d in range(devices):
        round_([d])  # warm-up
        ms = [round_([d])[0][d] for _ in range(repeats)]
        out["devices"].append({"device": d, "name": torch.cuda.get_device_name(d),
                               "alone_ms": [round(x, 3) for x in ms],
                               "alone_gbps": gbps(nbytes, statistics.median(ms))})
    every = list(range(devices))
    round_(every)  # warm-up
    rounds = [round_(every) for _ in range(repeats)]
    for row in out["devices"]:
        ms = [r[0][row["device"]] for r in rounds]
        row["concurrent_ms"] = [round(x, 3) for x in ms]
        row["concurrent_gbps"] = gbps(nbytes, statistics.median(ms))
    walls: List[float] = [w for _, w in rounds]
    out["concurrent_wall_ms"] = round(statistics.median(walls), 3)
    out["concurrent_aggregate_gbps"] = gbps(nbytes * devices, statistics.median(walls))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", type=int, required=True)
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    print(json.dumps(measure(args.devices, int(args.gib * GIB), args.repeats)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
