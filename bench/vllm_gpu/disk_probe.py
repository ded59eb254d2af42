#!/usr/bin/env python3
"""Raw throughput of the disk under L2: the ceiling of the benchmark's L2-hit rows.

    python3 disk_probe.py DIR [--gib 4]      # prints one JSON line (run.py --disk-baseline)

Everything with O_DIRECT (no page cache), `gib` GiB per pass, on the filesystem of DIR:
  write      8 files of gib/8 GiB, one dd after the other (bs=64M, oflag=direct, fsync)
  dd_*       the same files read back by dd (iflag=direct): 1 reader going through them all
             in 2 MiB and in 64 MiB requests, 4 readers (two files each) and 8 readers
             (one file each) in 2 MiB requests, 8 readers in 64 MiB requests
  files_*    gib GiB of 2 MiB files (an L2 block's size; 256 per directory), written and then
             read by T threads of this process, one open + one pread + close per file -- what
             the daemon's L2 reader threads (l2.io_threads, 4 by default) do -- at T = 4, 16
GB/s = 1e9 bytes per second. The files are deleted afterwards. It needs 2 x gib GiB free.
"""
from __future__ import annotations

import argparse
import json
import mmap
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, List

GIB = 1 << 30
MIB = 1 << 20
FILE_BYTES = 2 * MIB  # one L2 block file's payload (16 tokens x 128 KiB)


def _timed(cmds: List[List[str]]) -> float:
    """Seconds until every command (started at once) has finished; raises if one fails."""
    t0 = time.monotonic()
    procs = [subprocess.Popen(c, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for c in cmds]
    errs = [(p.wait(), p.stderr.read().decode(errors="replace") if p.stderr else "")
            for p in procs]
    dt = time.monotonic() - t0
    bad = [e for rc, e in errs if rc != 0]
    if bad:
        raise RuntimeError(f"dd failed: {bad[0][-500:]}")
    return dt


def _dd_read(f: Path, bs_mib: int) -> List[str]:
    return ["dd", f"if={f}", "of=/dev/null", f"bs={bs_mib}M", "iflag=direct"]


def _files_pass(paths: List[Path], threads: int, write: bool) -> float:
    """Each of `threads` threads takes every threads-th file: open (O_DIRECT), one
    pwrite/pread of 2 MiB from/to a page-aligned buffer, close. Seconds for all of them."""
    errors: List[BaseException] = []

    def work(k: int) -> None:
        buf = mmap.mmap(-1, FILE_BYTES)  # page-aligned, as O_DIRECT needs
        if write:
            buf.write(os.urandom(4096) * (FILE_BYTES // 4096))
        flags = (os.O_WRONLY | os.O_CREAT | os.O_TRUNC) if write else os.O_RDONLY
        try:
            for p in paths[k::threads]:
                fd = os.open(p, flags | os.O_DIRECT, 0o644)
                try:
                    n = os.pwritev(fd, [buf], 0) if write else os.preadv(fd, [buf], 0)
                    if n != FILE_BYTES:
                        raise OSError(f"short {'write' if write else 'read'} of {p}: {n}")
                finally:
                    os.close(fd)
        except BaseException as err:  # noqa: BLE001 - reported by the caller
            errors.append(err)

    t0 = time.monotonic()
    pool = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    if errors:
        raise errors[0]
    return time.monotonic() - t0


def filesystem(directory: Path) -> Dict[str, Any]:
    """df's view of DIR (device, type, size, free) and the block device's queue settings."""
    out: Dict[str, Any] = {}
    try:
        lines = subprocess.run(["df", "-PT", str(directory)], capture_output=True, text=True,
                               timeout=10).stdout.splitlines()
        dev, fstype, blocks, _used, avail = lines[1].split()[:5]
        out.update(device=dev, fstype=fstype, size_gib=round(int(blocks) * 1024 / GIB, 1),
                   free_gib=round(int(avail) * 1024 / GIB, 1))
        name = Path(os.path.realpath(dev)).name
        q = Path("/sys/class/block") / name
        if (q / "partition").exists():
            q = q.parent
        for key in ("rotational", "nr_requests", "max_sectors_kb", "scheduler"):
            try:
                out[key] = (q / "queue" / key).read_text().strip()
            except OSError:
                pass
    except (OSError, IndexError, ValueError, subprocess.TimeoutExpired) as err:
        out["error"] = str(err)
    return out


def probe(directory: Path, gib: int = 4) -> Dict[str, Any]:
    directory = directory / "disk-probe"
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    total = gib * GIB
    gb = total / 1e9
    res: Dict[str, Any] = {"gib": gib, "filesystem": filesystem(directory.parent)}
    t_all = time.monotonic()
    try:
        big = [directory / f"seq{i}.bin" for i in range(8)]
        per = total // 8 // (64 * MIB)  # 64 MiB blocks per file
        w = sum(_timed([["dd", "if=/dev/zero", f"of={f}", "bs=64M", f"count={per}",
                         "oflag=direct", "conv=fsync"]]) for f in big)
        res["write_gbps"] = round(gb / w, 2)

        def one_by_one(bs: int) -> float:
            return sum(_timed([_dd_read(f, bs)]) for f in big)

        res["dd_1x2M_gbps"] = round(gb / one_by_one(2), 2)
        res["dd_1x64M_gbps"] = round(gb / one_by_one(64), 2)
        # 4 readers, two files each (one after the other in each reader).
        res["dd_4x2M_gbps"] = round(gb / _timed(
            [["sh", "-c", " && ".join(" ".join(_dd_read(f, 2)) + " 2>/dev/null"
                                      for f in big[k::4])] for k in range(4)]), 2)
        res["dd_8x2M_gbps"] = round(gb / _timed([_dd_read(f, 2) for f in big]), 2)
        res["dd_8x64M_gbps"] = round(gb / _timed([_dd_read(f, 64) for f in big]), 2)
        for f in big:
            f.unlink()
        files = [directory / f"b{i // 256:03d}" / f"{i:05d}.blk" for i in range(total // FILE_BYTES)]
        for d in {p.parent for p in files}:
            d.mkdir()
        res["files_write_4t_gbps"] = round(gb / _files_pass(files, 4, write=True), 2)
        os.sync()
        for t in (4, 16):
            res[f"files_read_{t}t_gbps"] = round(gb / _files_pass(files, t, write=False), 2)
        res["best_read_gbps"] = max(v for k, v in res.items()
                                    if k.endswith("_gbps") and ("read" in k or k.startswith("dd_")))
    except (OSError, RuntimeError) as err:
        res["error"] = str(err)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    res["seconds"] = round(time.monotonic() - t_all, 1)
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("directory", help="a directory on the disk to measure (L2's)")
    ap.add_argument("--gib", type=int, default=4, help="GiB per pass (needs twice this free)")
    args = ap.parse_args()
    print(json.dumps(probe(Path(args.directory), args.gib)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
