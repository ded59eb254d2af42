#!/usr/bin/env python3
"""Where a staged 1 GiB load loses time against one big copy (issue 14), without the daemon.

The daemon's staged load moves whole 2 MiB L1 slots into a GPU staging buffer by DMA and
scatters the pieces with a kernel; at 8K tokens it lands at ~91 % of a plain 1 GiB copy while
DMA straight to the blocks (cross-layer) lands at ~97 %. This times the pieces of that
pipeline one at a time with torch on the same GPU, each the median of 5 after a warm-up:

  ceiling          one 1 GiB host->device copy (what engine_jobs.py calls the ceiling)
  4 streams        4 streams x one 256 MiB copy each
  2 MiB ops        4 streams x 128 copies of 2 MiB straight to their place (cross-layer)
  chunks           4 streams x 32 copies of 8 MiB into two 8 MiB buffers per stream
  chunks+scatter   the above, each chunk scattered as 32 KiB pieces by a kernel on a second
                   stream per run, a buffer's next copy waiting for its kernel (the daemon now)
  1 buffer         one 16 MiB buffer per stream, copy and kernel on one stream (the daemon
                   before e395ddb)
  ... (registered)  the same from an mmap'ed region registered with cudaHostRegister, as the
                   daemon's L1 pool is, instead of torch's pinned allocation

  python3 bench/gpu/staged_pipeline_probe.py [--out probe.json]
"""
import argparse
import json
import mmap
import statistics
import time

import torch

GiB = 1 << 30
MiB = 1 << 20
STREAMS = 4
PIECE = 32 << 10


def timed(fn, repeats=5):
    times = []
    for i in range(repeats + 1):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        if i:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def registered_host(nbytes):
    region = mmap.mmap(-1, nbytes)
    host = torch.frombuffer(region, dtype=torch.uint8)
    rc = torch.cuda.cudart().cudaHostRegister(host.data_ptr(), nbytes, 0)
    if int(rc) != 0:
        raise RuntimeError(f"cudaHostRegister: {rc}")
    return region, host


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    args = ap.parse_args()
    pinned = torch.empty(GiB, dtype=torch.uint8, pin_memory=True)
    region, registered = registered_host(GiB)
    registered.fill_(7)
    dev = torch.empty(GiB, dtype=torch.uint8, device="cuda")
    copy_streams = [torch.cuda.Stream() for _ in range(STREAMS)]
    kernel_streams = [torch.cuda.Stream() for _ in range(STREAMS)]
    staging = [torch.empty(16 * MiB, dtype=torch.uint8, device="cuda") for _ in range(STREAMS)]
    per_run = GiB // STREAMS
    # Each chunk's pieces go to shuffled places of the run's 256 MiB destination.
    place = torch.randperm(per_run // PIECE, device="cuda")

    def one_copy(host):
        dev.copy_(host, non_blocking=True)

    def four_streams(host):
        for r, s in enumerate(copy_streams):
            with torch.cuda.stream(s):
                dev[r * per_run:(r + 1) * per_run].copy_(host[r * per_run:(r + 1) * per_run],
                                                         non_blocking=True)

    def two_mib_ops(host):
        for r, s in enumerate(copy_streams):
            with torch.cuda.stream(s):
                for o in range(r * per_run, (r + 1) * per_run, 2 * MiB):
                    dev[o:o + 2 * MiB].copy_(host[o:o + 2 * MiB], non_blocking=True)

    def chunks(host, scatter, buffers=2):
        chunk = 16 * MiB // buffers
        moved = [[torch.cuda.Event() for _ in range(2)] for _ in range(STREAMS)]
        freed = [[torch.cuda.Event() for _ in range(2)] for _ in range(STREAMS)]
        n = per_run // chunk
        for k in range(n):
            for r in range(STREAMS):
                c, ks = copy_streams[r], kernel_streams[r] if buffers == 2 else copy_streams[r]
                b = k % buffers
                buf = staging[r][b * chunk:(b + 1) * chunk]
                src = host[r * per_run + k * chunk:r * per_run + (k + 1) * chunk]
                with torch.cuda.stream(c):
                    if scatter and buffers == 2 and k >= 2:
                        c.wait_event(freed[r][b])
                    buf.copy_(src, non_blocking=True)
                    moved[r][b].record(c)
                if not scatter:
                    continue
                with torch.cuda.stream(ks):
                    ks.wait_event(moved[r][b])
                    dst = dev[r * per_run:(r + 1) * per_run].view(-1, PIECE)
                    idx = place[(k * (chunk // PIECE)) % place.numel():][:chunk // PIECE]
                    dst.index_copy_(0, idx, buf.view(-1, PIECE))
                    freed[r][b].record(ks)
        for r in range(STREAMS):
            copy_streams[r].wait_stream(kernel_streams[r])

    cases = [
        ("ceiling", lambda: one_copy(pinned)),
        ("4 streams", lambda: four_streams(pinned)),
        ("2 MiB ops", lambda: two_mib_ops(pinned)),
        ("chunks", lambda: chunks(pinned, False)),
        ("chunks+scatter", lambda: chunks(pinned, True)),
        ("1 buffer", lambda: chunks(pinned, True, buffers=1)),
        ("ceiling (registered)", lambda: one_copy(registered)),
        ("2 MiB ops (registered)", lambda: two_mib_ops(registered)),
        ("chunks+scatter (registered)", lambda: chunks(registered, True)),
    ]
    results = {}
    for name, fn in cases:
        s = timed(fn)
        results[name] = {"ms": s * 1e3, "gbps": GiB / s / 1e9}
    base = results["ceiling"]["gbps"]
    for name, r in results.items():
        print(f"{name:30s} {r['ms']:7.2f} ms {r['gbps']:6.1f} GB/s {100 * r['gbps'] / base:5.1f} %",
              flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "results": results}, f, indent=1)
    torch.cuda.cudart().cudaHostUnregister(registered.data_ptr())
    del registered
    region.close()


if __name__ == "__main__":
    main()
