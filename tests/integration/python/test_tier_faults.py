"""Faults of the L2 and L3 tiers on real kvstratad processes and real files: bad files, a
full disk, kill -9 during heavy writes, a bad tier directory (the tiers themselves:
test_tiers.py).

Every test has its own work directory, daemons and namespace salt.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest

from kvstrata import pb
from host_child import block_bytes, chain_keys
from kvs_testing import wait_until
from tier_helpers import (BLOCK, MIB, ChainWriter, Node, assert_loads, block_files, blocks,
                          fresh_salt, l2_settings, tier, wait_written)


# ---------------------------------------------------------------------- faults


def _store_and_restart(workdir: Path, l2: Path, salt: str, count: int):
    keys, data = chain_keys(salt, count), blocks(12, count)
    a = Node(workdir, l2_settings(l2), salt)
    a.session.store(a.ns, keys, data)
    wait_written(a.client, pb.TIER_L2_LOCAL, count)
    fp = a.ns.fingerprint
    a.close()
    return keys, data, fp


def _path_of(l2: Path, fp: str, key: bytes) -> Path:
    return next(p for p in (l2 / fp).rglob(f"{key.hex()}.kv"))


def _flip_payload_byte(path: Path, l2: Path, fp: str, key: bytes) -> None:
    raw = bytearray(path.read_bytes())
    raw[4096 + 1000] ^= 0xFF
    path.write_bytes(bytes(raw))


def _truncate(path: Path, l2: Path, fp: str, key: bytes) -> None:
    with open(path, "r+b") as f:
        f.truncate(4096 + BLOCK // 2)


def _foreign(path: Path, l2: Path, fp: str, key: bytes) -> None:
    path.write_bytes(os.urandom(4096 + BLOCK))


def _other_namespace(path: Path, l2: Path, fp: str, key: bytes) -> None:
    """A valid block file of another namespace (same key) copied over this one."""
    other = Node(path.parents[4], l2_settings(l2.parent / "other-l2"), fresh_salt("other"), "o")
    try:
        other.session.store(other.ns, [key], [block_bytes(99, 0, BLOCK)])
        wait_written(other.client, pb.TIER_L2_LOCAL, 1)
        src = _path_of(l2.parent / "other-l2", other.ns.fingerprint, key)
    finally:
        other.close()
    shutil.copyfile(src, path)


@pytest.mark.parametrize("damage", [_flip_payload_byte, _truncate, _foreign, _other_namespace],
                         ids=["corrupted", "truncated", "foreign", "other-namespace"])
def test_bad_file_is_a_miss_and_quarantined(workdir: Path, damage) -> None:
    salt, l2 = fresh_salt("bad"), workdir / "l2"
    keys, data, fp = _store_and_restart(workdir, l2, salt, 6)
    victim = _path_of(l2, fp, keys[2])
    damage(victim, l2, fp, keys[2])
    b = Node(workdir, l2_settings(l2), salt)
    try:
        got = b.session.load(b.ns, keys)
        assert list(got) == [True, True, False, True, True, True]
        for i in (0, 1, 3, 4, 5):
            assert np.array_equal(got.blocks[i], data[i])
        assert not victim.exists()
        assert list((l2 / ".quarantine").iterdir()), "the bad file is kept for inspection"
        assert tier(b.client, pb.TIER_L2_LOCAL).quarantined_files == 1
        assert b.session.lookup(b.ns, keys).hit_blocks == 2, "now a miss from the bad block on"
    finally:
        b.close()


def test_stray_files_in_the_tree_are_ignored(workdir: Path) -> None:
    salt, l2 = fresh_salt("stray"), workdir / "l2"
    keys, data, fp = _store_and_restart(workdir, l2, salt, 3)
    (l2 / fp / "README").write_text("not a block")
    (l2 / "lost+found").mkdir()
    (l2 / fp / "zz").mkdir()
    b = Node(workdir, l2_settings(l2), salt)
    try:
        assert tier(b.client, pb.TIER_L2_LOCAL).blocks == 3 or wait_until(
            lambda: tier(b.client, pb.TIER_L2_LOCAL).blocks == 3, 5.0)
        assert_loads(b, keys, data)
    finally:
        b.close()


@pytest.fixture
def tiny_tmpfs(workdir: Path) -> Iterator[Path]:
    mount = workdir / "full"
    mount.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a 1 MiB tmpfs to fill (needs root): {r.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def test_full_disk_degrades_the_tier_not_the_engine(workdir: Path, tiny_tmpfs: Path) -> None:
    salt = fresh_salt("full")
    a = Node(workdir, l2_settings(tiny_tmpfs, **{"l2.capacity": "64MiB"}), salt)
    try:
        keys, data = chain_keys("full", 40), blocks(13, 40)  # 2.7 MiB of files > 1 MiB disk
        for i in range(0, 40, 5):
            assert a.session.store(a.ns, keys[i:i + 5], data[i:i + 5]).stored == 5
        assert wait_until(lambda: tier(a.client, pb.TIER_L2_LOCAL).queue_depth == 0, 20.0)
        t = tier(a.client, pb.TIER_L2_LOCAL)
        assert t.state == "degraded" and t.write_errors > 0
        assert t.effective_capacity_bytes < 64 * MIB
        assert_loads(a, keys, data)  # L1 still serves everything
        assert not [p for p in tiny_tmpfs.rglob("*.tmp.*")], "failed writes leave no temp file"
        # Later writes fit in the shrunk tier (it evicts to make room) instead of failing.
        before = t.write_errors
        more = chain_keys("full-more", 10)
        a.session.store(a.ns, more, blocks(14, 10))
        assert wait_until(lambda: tier(a.client, pb.TIER_L2_LOCAL).queue_depth == 0, 20.0)
        assert tier(a.client, pb.TIER_L2_LOCAL).write_errors - before <= 2
    finally:
        a.close()


def test_kill9_during_heavy_writes_never_serves_a_torn_block(workdir: Path) -> None:
    salt, l2 = fresh_salt("kill9"), workdir / "l2"
    a = Node(workdir, l2_settings(l2), salt)
    writer = ChainWriter(a, batches=1000).start()
    stored = writer.stored
    assert wait_until(lambda: len(stored) >= 20 and len(block_files(l2)) >= 40, 30.0)
    os.kill(a.daemon.proc.pid, signal.SIGKILL)  # Stores and writes still running.
    writer.stop()
    a.close(expect_clean=False)
    # A torn write can only be a temp file; plant one the way a dying writer leaves it.
    some = next(iter(block_files(l2)))
    shutil.copyfile(some, str(some) + ".tmp.999999.0123456789abcdef")

    b = Node(workdir, l2_settings(l2), salt)
    try:
        assert b.daemon.running()
        found = 0
        for batch in stored:
            keys, want = chain_keys(f"kill9-{batch}", 8), blocks(batch, 8)
            got = b.session.load(b.ns, keys)
            for ok, block, w in zip(got, got.blocks, want):
                if ok:
                    found += 1
                    assert np.array_equal(block, w), f"batch {batch}: wrong bytes served"
        assert found > 0, "nothing survived the crash"
        assert wait_until(lambda: not list(l2.rglob("*.tmp.*")), 10.0), "stale temp files kept"
    finally:
        b.close()


def test_bad_tier_directory_leaves_the_daemon_serving(workdir: Path) -> None:
    blocker = workdir / "not-a-dir"
    blocker.write_text("a file where the L2 directory should be")
    a = Node(workdir, l2_settings(blocker), fresh_salt("baddir"))
    try:
        t = tier(a.client, pb.TIER_L2_LOCAL)
        assert t.state == "unavailable"
        keys, data = chain_keys("baddir", 2), blocks(15, 2)
        a.session.store(a.ns, keys, data)
        assert_loads(a, keys, data)
    finally:
        a.close()


def test_tier_copies_are_in_the_metrics(workdir: Path) -> None:
    import re
    import urllib.request

    salt, l2 = fresh_salt("metrics"), workdir / "l2"
    keys, data = chain_keys("metrics", 6), blocks(16, 6)
    a = Node(workdir, l2_settings(l2), salt)
    try:
        a.session.store(a.ns, keys, data)
        wait_written(a.client, pb.TIER_L2_LOCAL, 6)
        list(a.client.clear(fingerprint=a.ns.fingerprint, tier=pb.TIER_L1_DRAM))
        assert_loads(a, keys, data)  # promoted back from L2
        address = a.client.get_status().metrics_address
        page = urllib.request.urlopen(f"http://{address}/metrics", timeout=10).read().decode()

        def moved(direction: str) -> float:
            m = re.search(r'^kvstrata_transfer_bytes_total\{[^}]*direction="%s"[^}]*\} (\S+)$'
                          % direction, page, re.M)
            return float(m.group(1)) if m else 0.0
        assert moved("l1_to_l2") == 6 * BLOCK
        assert moved("l2_to_l1") == 6 * BLOCK
    finally:
        a.close()
