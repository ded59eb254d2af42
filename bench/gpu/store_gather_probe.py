"""How can a store of small per-layer pieces (MLA: 18 KiB) reach the device->host ceiling
without the SMs? Compared in one process, on one GPU, each beside the ceiling of the run:

  ceiling       one contiguous cudaMemcpyAsync D2H of the job's bytes
  direct        one cudaMemcpy2DAsync D2H per layer (rows = blocks; what kBatch does)
  direct R/S    the same cut into copies of at most R rows, on S streams in turn (as slab
                boundaries and the lane's runs cut a job's 2-D copies)
  ce_staged     per chunk of blocks: the layers' pieces gathered into a staging buffer by
                cudaMemcpy2DAsync *device to device* (copy engine), then one contiguous D2H;
                two buffers in turn, the gather of chunk i+1 beside the D2H of chunk i
  sm_staged     the same with a gather kernel instead (what kStaged does today)
  ce_gather     the device-to-device gathers alone (no D2H)

and whether a device-to-device 2-D copy needs the SMs: it is queued behind a kernel that
holds every SM for ~30 ms (on another stream); if it finishes long before the kernel, a copy
engine moved it.

A job = `blocks` blocks of `layers` pieces of `piece` bytes; GPU: one tensor per layer,
[4096 blocks, piece] (consecutive block ids); host: pinned slots of layers x piece bytes,
consecutive. Needs cupy on a CUDA machine. Prints GB/s and % of the ceiling per row.
"""
from __future__ import annotations

import argparse
import statistics

import cupy

rt = cupy.cuda.runtime
D2H, D2D = rt.memcpyDeviceToHost, rt.memcpyDeviceToDevice

GATHER = cupy.RawKernel(r"""
extern "C" __global__ void gather(const unsigned long long* src, const unsigned long long* dst,
                                  int rows, int row_vecs) {
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const uint4* s = reinterpret_cast<const uint4*>(src[r]);
    uint4* d = reinterpret_cast<uint4*>(dst[r]);
    for (int i = threadIdx.x; i < row_vecs; i += blockDim.x) d[i] = s[i];
  }
}
""", "gather")

SPIN = cupy.RawKernel(r"""
extern "C" __global__ void spin(long long cycles) {
  long long t = clock64();
  while (clock64() - t < cycles) {}
}
""", "spin")


def timed(fn, reps):
    """Median ms of fn(start_stream) between events on the default stream's side."""
    out = []
    s = cupy.cuda.Stream(non_blocking=True)
    for _ in range(reps + 1):
        a, b = cupy.cuda.Event(), cupy.cuda.Event()
        cupy.cuda.Device().synchronize()
        a.record(s)
        fn(s)
        b.record(s)
        b.synchronize()
        out.append(cupy.cuda.get_elapsed_time(a, b))
    return statistics.median(out[1:])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--piece", type=int, default=18 << 10)
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--blocks", default="64,512,2048")
    ap.add_argument("--chunks", default="32,64,128")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--splits", default="128/1,113/1,64/1,128/4,113/4,56/4",
                    help="direct copies cut to R rows on S streams: R/S,...")
    a = ap.parse_args()
    piece, layers = a.piece, a.layers
    slot = piece * layers
    nmax = max(int(x) for x in a.blocks.split(","))
    gpu = [cupy.empty(4096 * piece, dtype=cupy.uint8) for _ in range(layers)]
    for i, t in enumerate(gpu):
        t[:] = i + 1
    host_mem = cupy.cuda.alloc_pinned_memory(nmax * slot)
    hp = host_mem.ptr
    cmax = max(int(x) for x in a.chunks.split(","))
    staging = [cupy.empty(cmax * slot, dtype=cupy.uint8) for _ in range(2)]
    flat = cupy.empty(nmax * slot, dtype=cupy.uint8)
    g2 = cupy.cuda.Stream(non_blocking=True)

    described = {}

    def direct(s, n):
        for l in range(layers):
            rt.memcpy2DAsync(hp + l * piece, slot, gpu[l].data.ptr, piece, piece, n, D2H, s.ptr)

    extra = [cupy.cuda.Stream(non_blocking=True) for _ in range(7)]

    def direct_split(s, n, rows, streams):
        """Copies of <= rows rows, stream k of `streams` (s and extra[:streams-1]) in turn;
        the extra streams start after s and are joined back into it."""
        lanes = [s] + extra[:streams - 1]
        go = cupy.cuda.Event()
        go.record(s)
        for x in lanes[1:]:
            x.wait_event(go)
        k = 0
        for l in range(layers):
            for b0 in range(0, n, rows):
                m = min(rows, n - b0)
                rt.memcpy2DAsync(hp + b0 * slot + l * piece, slot, gpu[l].data.ptr + b0 * piece,
                                 piece, piece, m, D2H, lanes[k % streams].ptr)
                k += 1
        for x in lanes[1:]:
            e = cupy.cuda.Event()
            e.record(x)
            s.wait_event(e)

    def staged(s, n, chunk, by_ce):
        # s: the D2H stream; g2: the gather stream. Buffers in turn; a buffer's gather waits
        # for the D2H that last read it.
        freed = [None, None]
        start = cupy.cuda.Event()
        start.record(s)
        g2.wait_event(start)
        for i, b0 in enumerate(range(0, n, chunk)):
            m = min(chunk, n - b0)
            buf = staging[i % 2]
            if freed[i % 2] is not None:
                g2.wait_event(freed[i % 2])
            if by_ce:
                for l in range(layers):
                    rt.memcpy2DAsync(buf.data.ptr + l * piece, slot,
                                     gpu[l].data.ptr + b0 * piece, piece, piece, m, D2D, g2.ptr)
            else:
                key = (b0, m, i % 2)
                if key not in described:  # Descriptors built once, outside the timed runs.
                    described[key] = (
                        cupy.asarray([gpu[l].data.ptr + (b0 + b) * piece
                                      for b in range(m) for l in range(layers)], dtype=cupy.uint64),
                        cupy.asarray([buf.data.ptr + b * slot + l * piece
                                      for b in range(m) for l in range(layers)], dtype=cupy.uint64))
                src, dst = described[key]
                with g2:
                    GATHER((min(m * layers, 132 * 4),), (256,),
                           (src, dst, cupy.int32(m * layers), cupy.int32(piece // 16)))
            got = cupy.cuda.Event()
            got.record(g2)
            s.wait_event(got)
            rt.memcpyAsync(hp + b0 * slot, buf.data.ptr, m * slot, D2H, s.ptr)
            freed[i % 2] = cupy.cuda.Event()
            freed[i % 2].record(s)

    def ce_gather(s, n, chunk):
        for b0 in range(0, n, chunk):
            m = min(chunk, n - b0)
            for l in range(layers):
                rt.memcpy2DAsync(staging[0].data.ptr + l * piece, slot,
                                 gpu[l].data.ptr + b0 * piece, piece, piece, m, D2D, s.ptr)

    print(f"piece {piece} B, {layers} layers, slot {slot >> 10} KiB; device "
          f"{cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()}")
    for n in (int(x) for x in a.blocks.split(",")):
        nbytes = n * slot
        ceil = timed(lambda s: rt.memcpyAsync(hp, flat.data.ptr, nbytes, D2H, s.ptr), a.reps)
        cbytes = nbytes
        cgbps = cbytes / ceil / 1e6
        rows = [("direct", timed(lambda s: direct(s, n), a.reps))]
        for rs in a.splits.split(","):
            r_, s_ = (int(x) for x in rs.split("/"))
            rows.append((f"direct {r_}/{s_}", timed(lambda s: direct_split(s, n, r_, s_), a.reps)))
        for c in (int(x) for x in a.chunks.split(",")):
            rows.append((f"ce_staged {c}", timed(lambda s: staged(s, n, c, True), a.reps)))
            rows.append((f"ce_gather {c}", timed(lambda s: ce_gather(s, n, c), a.reps)))
        rows.append((f"sm_staged {cmax}", timed(lambda s: staged(s, n, cmax, False), a.reps)))
        print(f"{n} blocks ({nbytes / 2**20:.0f} MiB): ceiling {cgbps:.1f} GB/s (one contiguous copy)")
        for name, ms in rows:
            gbps = nbytes / ms / 1e6
            print(f"  {name:<16} {ms:8.3f} ms  {gbps:5.1f} GB/s  {100 * gbps / cgbps:4.0f} %")
    # Correctness of the CE path: every slot holds layer l's bytes at l * piece.
    n = min(nmax, 128)
    cupy.cuda.Device().synchronize()
    s = cupy.cuda.Stream(non_blocking=True)
    staged(s, n, min(cmax, 64), True)
    s.synchronize()
    h = cupy.asnumpy(cupy.ndarray((n * slot,), dtype=cupy.uint8,
                                  memptr=cupy.cuda.MemoryPointer(
                                      cupy.cuda.UnownedMemory(hp, n * slot, host_mem), 0)))
    ok = all((h.reshape(n, layers, piece)[:, l, :] == l + 1).all() for l in range(layers))
    print(f"ce_staged bytes check ({n} blocks): {'PASS' if ok else 'FAIL'}")
    # Does a D2D 2-D copy need SMs? Queue it beside a kernel that holds all of them.
    sms = rt.getDeviceProperties(0)["multiProcessorCount"]
    clock_khz = rt.getDeviceProperties(0)["clockRate"]
    k, c = cupy.cuda.Stream(non_blocking=True), cupy.cuda.Stream(non_blocking=True)
    e = [cupy.cuda.Event() for _ in range(4)]
    e[0].record(k)
    with k:
        SPIN((sms * 2,), (1024,), (cupy.int64(clock_khz * 30),))
    e[1].record(k)
    e[2].record(c)
    ce_gather(c, 64, 64)
    e[3].record(c)
    cupy.cuda.Device().synchronize()
    print(f"beside a kernel on all {sms} SMs for {cupy.cuda.get_elapsed_time(e[0], e[1]):.1f} ms: "
          f"64-block D2D 2-D gather took {cupy.cuda.get_elapsed_time(e[2], e[3]):.2f} ms, ended "
          f"{cupy.cuda.get_elapsed_time(e[0], e[3]):.2f} ms after the kernel started")


if __name__ == "__main__":
    main()
