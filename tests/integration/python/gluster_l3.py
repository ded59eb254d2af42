"""What the L3-on-GlusterFS tests (test_l3_gluster.py) and bench/tiers/l3_gluster.py share:
the daemons' settings on a mount, one directory per test seen through every mount, and a
sampler of the directory's bytes on the brick over time.
"""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Dict, List, Tuple

from kvstrata import pb
from kvs_testing import wait_until
from tier_helpers import Node, store_in_batches, tier  # noqa: F401 (bench/tiers imports it here)

from gluster_fixture import Volume


def gl_settings(root: Path, **extra: str) -> Dict[str, str]:
    """L3 on `root` (a directory on a FUSE mount) with the daemon's defaults for everything
    else of [l3] (probe_timeout_ms, negative_cache_ms, fsync, eviction_interval_ms, ...);
    L1 holds every block the tests store."""
    return {"l1.capacity": "256MiB", "l3.enabled": "true", "l3.path": str(root), **extra}


class SharedDir:
    """One directory of a volume: `roots[i]` is it through mount i, `on_brick` on the brick
    (the bytes the volume really holds, read without going through FUSE)."""

    def __init__(self, volume: Volume, name: str) -> None:
        self.volume, self.name = volume, name
        self.roots = [m / name for m in volume.mounts]
        self.roots[0].mkdir()
        self.on_brick = volume.brick / name
        assert wait_until(lambda: all(r.is_dir() for r in self.roots), 10.0), \
            f"{name} not visible through every mount"

    def block_files(self, mount: int = 0) -> List[Path]:
        return [p for p in self.roots[mount].rglob("*.kv") if ".quarantine" not in p.parts]

    def brick_bytes(self) -> Tuple[int, int]:
        """(bytes, files) of the block and temp files on the brick (quarantine excluded)."""
        total = files = 0
        for dirpath, dirnames, names in os.walk(self.on_brick):
            if ".quarantine" in dirnames:
                dirnames.remove(".quarantine")
            for n in names:
                if n.endswith(".kv") or ".kv.tmp." in n:
                    try:
                        total += os.lstat(os.path.join(dirpath, n)).st_size
                        files += 1
                    except FileNotFoundError:
                        pass
        return total, files


class UsageSampler:
    """Samples SharedDir.brick_bytes() every `interval_s` on a thread: samples are
    (seconds since start, bytes, files)."""

    def __init__(self, shared: SharedDir, interval_s: float = 0.25) -> None:
        self.shared, self.interval_s = shared, interval_s
        self.samples: List[Tuple[float, int, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.t0 = time.monotonic()

    def __enter__(self) -> "UsageSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            used, files = self.shared.brick_bytes()
            self.samples.append((time.monotonic() - self.t0, used, files))
            self._stop.wait(self.interval_s)

    def peak(self) -> Tuple[float, int]:
        t, used, _ = max(self.samples, key=lambda s: s[1])
        return t, used

    def over(self, limit: int) -> List[Tuple[float, int, int]]:
        return [s for s in self.samples if s[1] > limit]


def l3(node: Node):
    return tier(node.client, pb.TIER_L3_SHARED)


def wait_l3_idle(node: Node, timeout_s: float = 120.0) -> bool:
    """Until the node's L3 write queue is empty."""
    return wait_until(lambda: l3(node).queue_depth == 0, timeout_s, interval_s=0.1)


def log_warnings(node: Node, lines: int = 20) -> str:
    """The daemon's last warnings and errors (for assertion messages)."""
    try:
        text = node.daemon.log_path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    found = [ln for ln in text.splitlines() if " W " in ln[:40] or " E " in ln[:40]]
    return "\n".join(found[-lines:]) or "(no warnings)"
