"""A disk made slow on purpose for some processes: a cgroup's block-I/O throttle.

    python3 throttle.py DIR --rate 8MB          # the throttle on DIR's disk, a fio read in it

Two hierarchies, detected at run time:
  cgroup v2 (/sys/fs/cgroup/cgroup.controllers lists "io"): a child /sys/fs/cgroup/<name>
      (the io controller enabled in the root's cgroup.subtree_control), "MAJ:MIN rbps=R
      wbps=W" into its io.max, processes into cgroup.procs;
  cgroup v1 (/sys/fs/cgroup/blkio): a child /sys/fs/cgroup/blkio/<name>, "MAJ:MIN R" into
      blkio.throttle.read_bps_device and write_bps_device, processes into cgroup.procs
      (tasks would move one thread; a daemon's I/O threads already run).
Both throttle O_DIRECT reads and writes (kvstratad's L2 uses O_DIRECT), not page-cache
writeback under v1. MAJ:MIN is the whole disk under DIR's filesystem (a partition's parent:
blkio throttles whole disks). Root only; `available()` says why not otherwise.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

ROOT = Path("/sys/fs/cgroup")
MB = 1_000_000


def parse_rate(text: str) -> int:
    """"8MB" -> 8e6 bytes/s, "512KB", "1GB", "0" or "none" -> 0 (no throttle)."""
    t = text.strip().upper().removesuffix("/S")
    if t in ("0", "NONE", "OFF"):
        return 0
    for suffix, mul in (("GB", 10**9), ("MB", MB), ("KB", 1000), ("B", 1)):
        if t.endswith(suffix):
            return int(float(t[: -len(suffix)]) * mul)
    return int(t)


def disk_of(path: Path) -> str:
    """MAJ:MIN of the whole disk holding `path` (a partition's parent disk)."""
    st = os.stat(path)
    dev = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    sys_dev = Path("/sys/dev/block") / dev
    if (sys_dev / "partition").is_file():
        return (sys_dev.resolve().parent / "dev").read_text().strip()
    return dev


def version() -> Optional[int]:
    """2 (unified, io controller), 1 (blkio), or None."""
    if (ROOT / "cgroup.controllers").is_file() and \
            "io" in (ROOT / "cgroup.controllers").read_text().split():
        return 2
    if (ROOT / "blkio" / "blkio.throttle.read_bps_device").is_file():
        return 1
    return None


def available() -> Optional[str]:
    """None if a throttle can be made here, else why not."""
    if os.geteuid() != 0:
        return "not root (a cgroup throttle needs root)"
    if version() is None:
        return "no cgroup io (v2) or blkio (v1) controller under /sys/fs/cgroup"
    return None


class Throttle:
    """A cgroup whose processes read and write `disk` at most `bps` bytes/s each way
    (0: no limit, the group still exists so a run's processes move the same way)."""

    def __init__(self, name: str, disk: str, bps: int) -> None:
        self.v = version()
        if self.v is None:
            raise RuntimeError(available() or "no cgroup controller")
        self.disk, self.bps = disk, bps
        self.dir = (ROOT / name) if self.v == 2 else (ROOT / "blkio" / name)
        if self.v == 2:
            sub = ROOT / "cgroup.subtree_control"
            if "io" not in sub.read_text().split():
                sub.write_text("+io")
        self.dir.mkdir(exist_ok=True)
        self.set_rate(bps)

    def set_rate(self, bps: int) -> None:
        self.bps = bps
        if self.v == 2:
            r = str(bps) if bps else "max"
            (self.dir / "io.max").write_text(f"{self.disk} rbps={r} wbps={r}\n")
        else:  # v1: 0 removes the rule
            for f in ("blkio.throttle.read_bps_device", "blkio.throttle.write_bps_device"):
                (self.dir / f).write_text(f"{self.disk} {bps}\n")

    def rules(self) -> str:
        """The kernel's view of the limits (io.max, or v1's two files)."""
        if self.v == 2:
            return (self.dir / "io.max").read_text().strip()
        return "; ".join(f"{f.split('.')[-1]}: {(self.dir / f).read_text().strip() or '-'}"
                         for f in ("blkio.throttle.read_bps_device",
                                   "blkio.throttle.write_bps_device"))

    def add(self, pid: int) -> None:
        """Move a process (all its threads) into the group."""
        (self.dir / "cgroup.procs").write_text(f"{pid}\n")

    def pids(self) -> List[int]:
        return [int(x) for x in (self.dir / "cgroup.procs").read_text().split()]

    def run(self, argv: Sequence[str], timeout_s: float = 120.0) -> subprocess.CompletedProcess:
        """A command run inside the group from its first instruction."""
        script = f'echo $$ > "{self.dir}/cgroup.procs" && exec "$@"'
        return subprocess.run(["sh", "-c", script, "sh", *argv], capture_output=True,
                              text=True, timeout=timeout_s)

    def remove(self) -> None:
        """Its processes back to the root group, then the group removed."""
        parent = self.dir.parent
        for pid in self.pids():
            try:
                (parent / "cgroup.procs").write_text(f"{pid}\n")
            except OSError:
                pass
        for _ in range(50):
            try:
                self.dir.rmdir()
                return
            except OSError:
                time.sleep(0.1)


def fio_read(th: Throttle, directory: Path, size: int, bs: int, jobs: int) -> Dict[str, Any]:
    """O_DIRECT random reads of `bs` by `jobs` threads (psync: L2's reader threads, one
    request each) over a file of `size` bytes in `directory`, run inside the group; the
    file is written before (outside the group) and deleted after. MB/s = 1e6 bytes/s."""
    f = directory / "throttle_probe.fio"
    with open(f, "wb") as out:
        chunk = os.urandom(1 << 20)
        for _ in range(max(1, size >> 20)):
            out.write(chunk)
        out.flush()
        os.fsync(out.fileno())
    try:
        argv = ["fio", "--name=l2read", f"--filename={f}", "--rw=randread", f"--bs={bs}",
                "--direct=1", "--ioengine=psync", f"--numjobs={jobs}", "--group_reporting",
                f"--size={max(1, size >> 20)}M", "--time_based", "--runtime=4",
                "--output-format=json"]
        res = th.run(argv, timeout_s=60)
        if res.returncode != 0:
            return {"error": res.stderr[-300:]}
        read = json.loads(res.stdout)["jobs"][0]["read"]
        return {"tool": "fio", "bs": bs, "jobs": jobs, "MB_s": round(read["bw_bytes"] / MB, 2),
                "lat_ms_mean": round(read["clat_ns"]["mean"] / 1e6, 2),
                "command": " ".join(argv)}
    finally:
        f.unlink(missing_ok=True)


def dd_read(th: Throttle, directory: Path, size: int, bs: int) -> Dict[str, Any]:
    """One sequential O_DIRECT dd read of a `size`-byte file, inside the group."""
    f = directory / "throttle_probe.dd"
    subprocess.run(["dd", "if=/dev/urandom", f"of={f}", "bs=1M", f"count={max(1, size >> 20)}",
                    "oflag=direct"], capture_output=True, check=True)
    try:
        t0 = time.monotonic()
        res = th.run(["dd", f"if={f}", "of=/dev/null", f"bs={bs}", "iflag=direct"])
        dt = time.monotonic() - t0
        if res.returncode != 0:
            return {"error": res.stderr[-300:]}
        return {"tool": "dd", "bs": bs, "bytes": f.stat().st_size,
                "MB_s": round(f.stat().st_size / dt / MB, 2), "stderr": res.stderr.strip()[-200:]}
    finally:
        f.unlink(missing_ok=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", type=Path)
    ap.add_argument("--rate", default="8MB")
    ap.add_argument("--bs", type=int, default=512 << 10)
    ap.add_argument("--jobs", type=int, default=4)
    args = ap.parse_args()
    why = available()
    if why:
        raise SystemExit(why)
    args.dir.mkdir(parents=True, exist_ok=True)
    th = Throttle("kvs-throttle-probe", disk_of(args.dir), parse_rate(args.rate))
    try:
        size = max(8 << 20, min(256 << 20, th.bps * 3 if th.bps else 256 << 20))
        print(json.dumps({"cgroup": th.v, "disk": th.disk, "rules": th.rules(),
                          "fio": fio_read(th, args.dir, size, args.bs, args.jobs),
                          "dd": dd_read(th, args.dir, size, args.bs)}))
    finally:
        th.remove()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
