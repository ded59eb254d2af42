"""Is one cudaMemcpy2DAsync as fast as many 1-D copies for KV pieces? (H2D and D2H)

A 1 GiB pinned host pool of 2 MiB slots; per (piece index, run of slots) one 2-D copy
(width = piece bytes, src pitch = slot bytes, dst pitch = piece bytes) against the same
bytes as one cudaMemcpyAsync per piece and as one contiguous 1 GiB copy (the ceiling).
Prints GB/s per row. Needs torch and cupy on a CUDA machine.
"""
from __future__ import annotations

import time

import cupy
import torch

SLOT = 2 << 20
SLOTS = 512                         # 1 GiB
rt = cupy.cuda.runtime


def timed(fn, reps=5):
    s = torch.cuda.current_stream()
    best = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn(s.cuda_stream)
        s.synchronize()
        best.append(time.perf_counter() - t0)
    best.sort()
    return best[len(best) // 2]


def main() -> None:
    host = torch.empty(SLOTS * SLOT, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(SLOTS * SLOT, dtype=torch.uint8, device="cuda")
    hp, dp = host.data_ptr(), dev.data_ptr()
    total = SLOTS * SLOT
    h2d, d2h = rt.memcpyHostToDevice, rt.memcpyDeviceToHost
    t = timed(lambda st: rt.memcpyAsync(dp, hp, total, h2d, st))
    print(f"ceiling one 1 GiB copy h2d: {total / t / 1e9:.1f} GB/s")
    for piece in (16 << 10, 32 << 10, 64 << 10):
        per = SLOT // piece
        for run in (16, 32, 64, 512):
            def two_d(st, kind=h2d):
                for r0 in range(0, SLOTS, run):
                    for j in range(per):
                        # dst: piece j of slots r0.. packed by piece (as a K tensor's blocks)
                        d = dp + j * SLOTS * piece + r0 * piece
                        h = hp + r0 * SLOT + j * piece
                        if kind == h2d:
                            rt.memcpy2DAsync(d, piece, h, SLOT, piece, run, kind, st)
                        else:
                            rt.memcpy2DAsync(h, SLOT, d, piece, piece, run, kind, st)
            t2 = timed(two_d)
            t3 = timed(lambda st: two_d(st, d2h))
            print(f"piece {piece >> 10:>3} KiB run {run:>3}: 2-D h2d {total / t2 / 1e9:5.1f} GB/s"
                  f" d2h {total / t3 / 1e9:5.1f} GB/s ({SLOTS // run * per} calls)")
        def one_d(st):
            for b in range(SLOTS):
                for j in range(per):
                    rt.memcpyAsync(dp + j * SLOTS * piece + b * piece, hp + b * SLOT + j * piece,
                                   piece, h2d, st)
        t1 = timed(one_d, reps=3)
        print(f"piece {piece >> 10:>3} KiB: 1-D h2d {total / t1 / 1e9:5.1f} GB/s ({SLOTS * per} calls)")


if __name__ == "__main__":
    main()
