"""What a power cut may leave in a tier's directory that a kill -9 cannot (crash_loop.py,
--power-cut-every): applied to files the daemon touched in the seconds before the kill,
through the same path the daemon uses (on GlusterFS: the mount, never the brick).

- L2 (`l2.fsync = none`): a renamed block file whose data never reached the disk: cut to
  0 bytes or to a random length, a 4 KiB page of it (header or payload) reading as zeros,
  or the file gone (its rename lost); and temp files of a dead writer, whole or partial.
- L3 (`l3.fsync = file`: data synced before the rename, the rename itself not): the file
  gone, or back under a temp name; a journal file cut mid-line or ending in garbage; the
  usage ledger cut short or overwritten with a torn mix.
Returns the paths it damaged.
"""
from __future__ import annotations

import os
import random
from pathlib import Path
from typing import List, Set

PAGE = 4096
DEAD_PID = 4194000  # above the default pid_max: never a live writer


def _recent(root: Path, since: float, want) -> List[Path]:
    found = []
    for dirpath, dirnames, names in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".quarantine"]
        for n in names:
            p = Path(dirpath) / n
            try:
                if want(n) and p.stat().st_mtime >= since:
                    found.append(p)
            except FileNotFoundError:
                pass
    return found


def _zero_page(path: Path, rng: random.Random) -> None:
    size = path.stat().st_size
    pages = max(1, size // PAGE)
    with open(path, "r+b") as f:
        f.seek(rng.randrange(pages) * PAGE)
        f.write(b"\0" * min(PAGE, size))


def _temp_name(path: Path, rng: random.Random) -> Path:
    return path.with_name(f"{path.name}.tmp.{DEAD_PID}.{rng.getrandbits(64):016x}")


def damage_like_power_cut(root: Path, tier: str, rng: random.Random, since: float,
                          fraction: float = 0.3) -> Set[str]:
    damaged: Set[str] = set()
    blocks = _recent(root, since, lambda n: n.endswith(".kv"))
    for p in blocks:
        if rng.random() >= fraction:
            continue
        try:
            roll = rng.random()
            if tier == "l2":
                if roll < 0.25:
                    os.truncate(p, 0)
                elif roll < 0.5:
                    os.truncate(p, rng.randrange(1, p.stat().st_size))
                elif roll < 0.8:
                    _zero_page(p, rng)
                else:
                    os.unlink(p)
            elif roll < 0.5:
                os.unlink(p)
            else:
                os.rename(p, _temp_name(p, rng))
            damaged.add(str(p))
        except FileNotFoundError:
            pass
    if tier == "l2" and blocks:  # a dead writer's temp files, whole and partial
        for p in rng.sample(blocks, min(3, len(blocks))):
            tmp = _temp_name(p, rng)
            try:
                tmp.write_bytes(os.urandom(rng.randrange(1, 3 * PAGE)))
                damaged.add(str(tmp))
            except OSError:
                pass
    if tier == "l3":
        for log in _recent(root / ".kvstrata-journal", since - 120,
                           lambda n: n.endswith(".log")):
            if rng.random() < 0.5:
                try:
                    size = log.stat().st_size
                    if size and rng.random() < 0.5:
                        os.truncate(log, rng.randrange(size))
                    else:
                        with open(log, "ab") as f:
                            f.write(os.urandom(rng.randrange(1, 80)).replace(b"\n", b" "))
                    damaged.add(str(log))
                except FileNotFoundError:
                    pass
        ledger = root / ".kvstrata-usage"
        if ledger.exists() and rng.random() < 0.5:
            data = bytearray(ledger.read_bytes())
            if rng.random() < 0.5:
                os.truncate(ledger, rng.randrange(max(1, len(data))))
            else:
                at = rng.randrange(max(1, min(len(data), 200)))
                data[at:at + 64] = os.urandom(64)
                ledger.write_bytes(bytes(data))
            damaged.add(str(ledger))
    return damaged
