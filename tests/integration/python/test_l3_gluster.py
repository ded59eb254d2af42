"""L3 on a real GlusterFS 10 volume (gluster_fixture.py): one brick, two FUSE mounts, real
kvstratad processes with [l3] on the separate mounts (outside the volume's network
namespace). Sharing with the defaults, an index made stale by another daemon or an `rm`,
kill -9 mid-write, a corrupted file, a full brick, the shared cap with two writers, two-writer
starts racing to create the same hash directories, and the ledger's updates from two mounts.

Skips the module, saying why, without root, /dev/fuse, `ip netns` or GlusterFS
(scripts/setup_gluster.sh installs it). Each test has its own directory on the volume.
"""
from __future__ import annotations

import itertools
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Iterator, List, Tuple

import pytest

import kvstrata
from kvstrata import pb
from gluster_fixture import GlusterCluster, unavailable_reason
from gluster_l3 import (SharedDir, UsageSampler, gl_settings, l3, log_warnings,
                        store_in_batches, wait_l3_idle)
from host_child import chain_keys
from kvs_testing import REPO, daemon_binary, short_tmpdir, wait_until
from prom_text import scrape
from tier_helpers import (FILE_BYTES, MIB, ChainWriter, Node, assert_exact_or_missing, blocks,
                          close_all, fresh_salt)

REASON = unavailable_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"GlusterFS L3 tests: {REASON}")
_dirs = itertools.count()


@pytest.fixture(scope="module")
def cluster() -> Iterator[GlusterCluster]:
    with GlusterCluster(short_tmpdir()) as gl:
        yield gl


@pytest.fixture(scope="module")
def volume(cluster: GlusterCluster):
    return cluster.volume("kvs", mounts=2)


@pytest.fixture
def shared(volume, request) -> SharedDir:
    return SharedDir(volume, f"{request.node.name[:40]}-{next(_dirs)}")


def test_mounts_are_one_volume_usable_outside_the_namespace(cluster, volume) -> None:
    """The daemons run in the root network namespace; glusterd in its own."""
    glusterd_net = os.readlink(f"/proc/{cluster.glusterd.pid}/ns/net")
    assert glusterd_net != os.readlink("/proc/self/ns/net")
    a, b = volume.mounts
    (a / "probe").write_bytes(b"through mount 0")
    assert wait_until(lambda: (b / "probe").exists(), 5.0)
    assert (b / "probe").read_bytes() == b"through mount 0"
    (b / "probe").unlink()


# ---------------------------------------------------------------------- sharing


@pytest.fixture(scope="module")
def published(volume):
    """Daemon A (mount 0) stored 1,000 blocks and wrote them all to L3, then stopped."""
    shared = SharedDir(volume, "published")
    salt, keys, data = fresh_salt("published"), chain_keys("published", 1000), blocks(40, 1000)
    work = short_tmpdir()
    a = Node(work, gl_settings(shared.roots[0]), salt, "a")
    try:
        assert store_in_batches(a, keys, data) == 1000
        assert wait_l3_idle(a), l3(a)
        t = l3(a)
        assert t.written_blocks == 1000 and t.dropped_writes == 0 and t.write_errors == 0, t
    finally:
        a.close()
    yield shared, salt, keys, data, work
    shutil.rmtree(work, ignore_errors=True)


def test_first_lookup_finds_all_of_another_daemons_blocks(published) -> None:
    """B reads A's write journal when its L3 opens (l3.follow_interval_ms), so its first
    lookup of A's 1,000 blocks needs no stat: probing them over FUSE takes ~0.25 s (the
    per-lookup bound l3.probe_timeout_ms is 50 ms)."""
    shared, salt, keys, _, work = published
    b = Node(work, gl_settings(shared.roots[1]), salt, "b1")
    try:
        hit = b.session.lookup(b.ns, keys)
        assert hit.hit_blocks == 1000, f"first lookup: {hit.hit_blocks} of 1000"
    finally:
        b.close()


def test_first_lookup_of_a_32_key_chain_finds_all_of_it(published) -> None:
    """Without the journals (probes only), one cold lookup of a 32-key chain probes all of it
    over FUSE (two rounds of 16 stats of 1-16 ms on a quiet machine, inside the default
    l3.probe_timeout_ms of 50 ms). The test gives the probes 1 s: what it checks is that the
    rounds cover the chain; on a loaded CI machine the stats alone passed 50 ms (22 and 29 of
    32 found), and how fast they are is the benchmarks' business, not a test's."""
    shared, salt, keys, _, work = published
    b = Node(work, gl_settings(shared.roots[1], **{"l3.follow_interval_ms": "0",
                                                   "l3.probe_timeout_ms": "1000"}), salt, "b3")
    try:
        first = [b.session.lookup(b.ns, keys[i:i + 32]).hit_blocks for i in range(0, 256, 32)]
        assert first == [32] * 8, f"first lookups of 8 chains of 32: {first}"
    finally:
        b.close()


def test_another_daemons_blocks_are_found_and_loaded_byte_exact(published) -> None:
    """Lookups find all 1,000 within a few tries; every block loads with A's bytes."""
    shared, salt, keys, data, work = published
    b = Node(work, gl_settings(shared.roots[1]), salt, "b2")
    try:
        assert wait_until(lambda: b.session.lookup(b.ns, keys).hit_blocks == 1000, 30.0), \
            f"{b.session.lookup(b.ns, keys).hit_blocks} of 1000"
        for i in range(0, 1000, 100):
            hit = b.session.lookup(b.ns, keys[:i + 100], lease=True)
            assert hit.hit_blocks == i + 100
            got = b.session.load(b.ns, keys[i:i + 100], lease_id=hit.lease_id)
            assert assert_exact_or_missing(got, data[i:i + 100], "shared") == 100, list(got)
        assert l3(b).promoted_blocks == 1000
    finally:
        b.close()


# ---------------------------------------------------------------------- stale index


def remove_elsewhere(remover: str, shared: SharedDir, b: Node, keys) -> None:
    """Deletes the blocks' files through mount 1: `rm`, or daemon B's `clear` of L3."""
    if remover == "rm":
        for p in shared.block_files(1):
            p.unlink()
    else:
        assert wait_until(lambda: b.session.lookup(b.ns, keys).hit_blocks == len(keys), 15.0)
        list(b.client.clear(fingerprint=b.ns.fingerprint, tier=pb.TIER_L3_SHARED))
    assert wait_until(lambda: not shared.block_files(0), 10.0), "files still visible on A"


@pytest.mark.parametrize("remover", ["rm", "other-daemon-clear"])
def test_files_deleted_elsewhere_are_misses_then_written_again(shared, workdir, remover) -> None:
    """A's index still names the files: a load is a miss (never wrong bytes), lookups miss
    within the 10 s re-probe, and a store once the index entries are older than that
    writes every block again; A's count then matches the directory."""
    salt, keys, data = fresh_salt("stale"), chain_keys(f"stale-{remover}", 32), blocks(41, 32)
    a = Node(workdir, gl_settings(shared.roots[0]), salt, "a")
    b = Node(workdir, gl_settings(shared.roots[1]), salt, "b")
    try:
        a.session.store(a.ns, keys, data)
        assert wait_l3_idle(a) and l3(a).written_blocks == 32, l3(a)
        written_at = time.monotonic()
        assert len(shared.block_files(1)) == 32
        remove_elsewhere(remover, shared, b, keys)
        list(a.client.clear(fingerprint=a.ns.fingerprint, tier=pb.TIER_L1_DRAM))
        got = a.session.load(a.ns, keys)
        assert assert_exact_or_missing(got, data, "deleted") == 0, "a deleted file was served"
        assert wait_until(lambda: a.session.lookup(a.ns, keys).hit_blocks == 0, 20.0), \
            a.session.lookup(a.ns, keys).hit_blocks
        time.sleep(max(0.0, written_at + 11.0 - time.monotonic()))  # past the 10 s re-probe
        a.session.store(a.ns, keys, data)
        assert wait_until(lambda: len(shared.block_files(1)) == 32, 30.0), \
            f"stored again: {len(shared.block_files(1))} of 32 files back; {l3(a)}"
        assert wait_l3_idle(a)
        assert l3(a).blocks == 32, l3(a)
        assert wait_until(lambda: b.session.lookup(b.ns, keys).hit_blocks == 32, 15.0)
        hit = b.session.lookup(b.ns, keys, lease=True)
        got = b.session.load(b.ns, keys, lease_id=hit.lease_id)
        assert assert_exact_or_missing(got, data, "rewritten") == 32
    finally:
        close_all(b, a)


# A store within the index's 10 s presence_ttl of the file's deletion elsewhere: the
# write-down probes the shared tier before trusting its index (issue 17), so it writes again.
def test_store_right_after_a_deletion_elsewhere_writes_again(shared, workdir) -> None:
    salt, keys, data = fresh_salt("stale-now"), chain_keys("stale-now", 32), blocks(44, 32)
    a = Node(workdir, gl_settings(shared.roots[0]), salt, "a")
    try:
        a.session.store(a.ns, keys, data)
        assert wait_l3_idle(a) and l3(a).written_blocks == 32, l3(a)
        remove_elsewhere("rm", shared, a, keys)
        list(a.client.clear(fingerprint=a.ns.fingerprint, tier=pb.TIER_L1_DRAM))
        a.session.store(a.ns, keys, data)
        assert wait_l3_idle(a)
        assert wait_until(lambda: len(shared.block_files(1)) == 32, 10.0), \
            f"stored again: {len(shared.block_files(1))} of 32 files back; {l3(a)}"
        assert l3(a).blocks == len(shared.block_files(1)), l3(a)
    finally:
        a.close()


def lookup_and_load(node: Node, keys, data) -> Tuple[int, int]:
    """A lookup with a lease, then a load of what it found: (hits, blocks loaded)."""
    hit = node.session.lookup(node.ns, keys, lease=True)
    if hit.hit_blocks == 0:
        return 0, 0
    got = node.session.load(node.ns, keys[:hit.hit_blocks], lease_id=hit.lease_id)
    return hit.hit_blocks, assert_exact_or_missing(got, data, "after a removal")


@pytest.mark.parametrize("check", ["sync", "async"])
@pytest.mark.parametrize("remover", ["rm", "other-daemon-clear"])
def test_no_unloadable_hit_from_0_1_s_after_a_removal(shared, workdir, remover, check) -> None:
    """Issue 46 items 5-7: an operator's rm stayed a hit for 25 s (the index trusted an
    entry for 10 minutes while following the journals), a peer's clear for up to ~0.5 s, and
    a late journal line put blocks that failed to load back as present. Now a shared tier's
    entry not seen within 100 ms is probed past the client's caches, and no older line
    undoes a removal. With l3.presence_check = "sync" the lookup waits for those probes:
    from 0.1 s after the removal on, neither daemon reports a hit it cannot load. With
    "async" (the default: a lookup costs no I/O for them) the first lookup after the removal
    still counts them and starts the probes, and every lookup from then on is right -- a
    lookup alone, no failed load, tells the daemon."""
    n = 48
    salt, keys, data = fresh_salt("gone"), chain_keys(f"gone-{remover}-{check}", n), blocks(47, n)
    extra = {"l3.presence_check": check}
    a = Node(workdir, gl_settings(shared.roots[0], **extra), salt, "a")
    b = Node(workdir, gl_settings(shared.roots[1], **extra), salt, "b")
    try:
        a.session.store(a.ns, keys, data)
        assert wait_l3_idle(a) and l3(a).written_blocks == n, l3(a)
        list(a.client.clear(fingerprint=a.ns.fingerprint, tier=pb.TIER_L1_DRAM))
        assert wait_until(lambda: b.session.lookup(b.ns, keys).hit_blocks == n, 15.0)
        assert lookup_and_load(a, keys, data) == (n, n)  # A read them all just now
        list(a.client.clear(fingerprint=a.ns.fingerprint, tier=pb.TIER_L1_DRAM))
        files = shared.block_files(1)
        assert len(files) == n
        if remover == "rm":
            for p in files:
                p.unlink()
        else:
            list(b.client.clear(fingerprint=b.ns.fingerprint, tier=pb.TIER_L3_SHARED))
        removed_at = time.monotonic()
        seen = []
        samples = (0.1, 0.2, 0.5, 1.0, 1.5, 2.5, 4.0) if check == "sync" else \
            (0.3, 0.5, 1.0, 1.5, 2.5, 4.0)
        if check == "async":  # the first lookups after the removal: no load
            time.sleep(max(0.0, removed_at + 0.1 - time.monotonic()))
            for node in (a, b):
                node.session.lookup(node.ns, keys)
        for at in samples:
            time.sleep(max(0.0, removed_at + at - time.monotonic()))
            for name, node in (("a", a), ("b", b)):
                hits, loaded = lookup_and_load(node, keys, data)
                seen.append((at, name, hits, hits - loaded))
        assert all(unloadable == 0 for *_, unloadable in seen), \
            f"(s after the removal, daemon, hits, unloadable): {seen}"
    finally:
        close_all(b, a)


def test_dropped_writes_are_counted_once(shared, workdir) -> None:
    """A burst beyond a small write queue: the tier's dropped_writes, the metric
    kvstrata_stores_dropped_total{tier="l3",reason="queue_full"} and Admin.GetStats'
    dropped_stores all say the same number (it was counted twice: 5,646 for 2,823)."""
    salt, keys = fresh_salt("drops"), chain_keys("drops", 400)
    a = Node(workdir, gl_settings(shared.roots[0], **{"l3.write_queue_blocks": "8",
                                                       "l3.io_threads": "1",
                                                       "l3.backlog_policy": "drop"}), salt, "a")
    try:
        for i in range(0, 400, 100):
            a.session.store(a.ns, keys[i:i + 100], blocks(45 + i, 100))
        assert wait_l3_idle(a), l3(a)
        t = l3(a)
        assert t.dropped_writes > 0 and t.dropped_writes + t.written_blocks == 400, t
        m = scrape(a.client.get_status().metrics_address)
        assert m.value("kvstrata_stores_dropped_total", tier="l3",
                       reason="queue_full") == t.dropped_writes
        stats = {c.name: c.value for c in a.client.get_stats().counters}
        assert stats["l1_dropped_stores"] == 0 and stats["l1_not_admitted_stores"] == 0, stats
        assert stats["dropped_stores"] == t.dropped_writes, (stats["dropped_stores"], t)
    finally:
        a.close()


# ---------------------------------------------------------------------- faults


def test_kill9_mid_write_serves_no_partial_file(shared, workdir) -> None:
    salt = fresh_salt("kill9")
    a = Node(workdir, gl_settings(shared.roots[0]), salt, "a")
    writer = ChainWriter(a).start()
    try:
        assert wait_until(lambda: len(shared.block_files(1)) >= 80, 60.0)
        os.kill(a.daemon.proc.pid, signal.SIGKILL)  # L3 writes in flight
        writer.stop()
    finally:
        a.close(expect_clean=False)
    stored = writer.stored
    files = shared.block_files(1)
    sizes = {p.stat().st_size for p in files}
    assert sizes == {FILE_BYTES}, f"block files of other sizes: {sizes}"
    b = Node(workdir, gl_settings(shared.roots[1]), salt, "b")
    try:
        found = 0
        for batch in stored:
            got = b.session.load(b.ns, chain_keys(f"kill9-{batch}", 8))
            found += assert_exact_or_missing(got, blocks(batch, 8), f"batch {batch}")
        assert found >= len(files) - 8 * 2, (found, len(files))
    finally:
        b.close()


def test_two_daemons_one_killed_the_other_serves_on(shared, workdir) -> None:
    """Issue 46: two daemons share L3 (one per mount); A is killed -9 while it writes. B
    loads A's finished blocks from L3 byte-exact all along, never waits long on A's death
    (A's ledger flock goes with its process), goes on writing (its writes are admitted), and
    A, started again, loads B's blocks written after the kill byte-exact."""
    salt = fresh_salt("two-kill")
    a = Node(workdir, gl_settings(shared.roots[0]), salt, "a")
    b = Node(workdir, gl_settings(shared.roots[1]), salt, "b")
    try:
        early = 12  # A's blocks before the kill, in L3 and not in B's L1
        for batch in range(early):
            a.session.store(a.ns, chain_keys(f"two-a-{batch}", 8), blocks(batch, 8))
        assert wait_l3_idle(a)
        stop, killed = threading.Event(), threading.Event()
        worst_ms, loads, found = [0.0], [0], [0]

        def writer() -> None:  # A keeps writing until it dies
            for batch in range(early, 4000):
                if stop.is_set():
                    return
                try:
                    a.session.store(a.ns, chain_keys(f"two-a-{batch}", 8), blocks(batch, 8))
                except kvstrata.KVStrataError:
                    return

        def reader() -> None:  # B loads A's early blocks through the kill
            i = 0
            while not stop.is_set():
                batch = i % early
                t0 = time.monotonic()
                got = b.session.load(b.ns, chain_keys(f"two-a-{batch}", 8))
                worst_ms[0] = max(worst_ms[0], (time.monotonic() - t0) * 1e3)
                found[0] += assert_exact_or_missing(got, blocks(batch, 8), f"A's batch {batch}")
                loads[0] += 1
                b.client.evict(fingerprint=b.ns.fingerprint,  # the next load reads L3 again
                               keys=chain_keys(f"two-a-{batch}", 8), tier=pb.TIER_L1_DRAM)
                i += 1

        threads = [threading.Thread(target=writer), threading.Thread(target=reader)]
        for t in threads:
            t.start()
        try:
            assert wait_until(lambda: len(shared.block_files(1)) >= 8 * early + 40, 60.0)
            os.kill(a.daemon.proc.pid, signal.SIGKILL)  # L3 writes and ledger updates in flight
            killed.set()
            time.sleep(3.0)  # B serves on
        finally:
            stop.set()
            for t in threads:
                t.join(60)
        a.close(expect_clean=False)
        assert loads[0] > 0 and found[0] == 8 * loads[0], (loads[0], found[0])
        assert worst_ms[0] < 5000, f"a load of B took {worst_ms[0]:.0f} ms around A's kill"
        # B goes on writing after A's death: admitted and written.
        before = l3(b).written_blocks
        for batch in range(6):
            b.session.store(b.ns, chain_keys(f"two-b-{batch}", 8), blocks(100 + batch, 8))
        assert wait_l3_idle(b)
        assert l3(b).written_blocks - before == 48, (l3(b), log_warnings(b))
        sizes = {p.stat().st_size for p in shared.block_files(1)}
        assert sizes == {FILE_BYTES}, f"block files of other sizes: {sizes}"
        a = Node(workdir, gl_settings(shared.roots[0]), salt, "a2")
        for batch in range(6):
            got = a.session.load(a.ns, chain_keys(f"two-b-{batch}", 8))
            assert assert_exact_or_missing(got, blocks(100 + batch, 8), f"B's {batch}") == 8
    finally:
        close_all(a, b)


def test_corrupted_file_is_a_miss(shared, workdir) -> None:
    """A byte flipped through mount 1 in a file daemon A (mount 0) wrote and still has
    open-able through its own mount."""
    salt, keys, data = fresh_salt("corrupt"), chain_keys("corrupt", 6), blocks(42, 6)
    a = Node(workdir, gl_settings(shared.roots[0]), salt, "a")
    try:
        a.session.store(a.ns, keys, data)
        assert wait_l3_idle(a) and l3(a).written_blocks == 6
        victim = next(p for p in shared.block_files(1) if p.name == f"{keys[2].hex()}.kv")
        raw = bytearray(victim.read_bytes())
        raw[4096 + 1000] ^= 0xFF
        victim.write_bytes(bytes(raw))
        list(a.client.clear(fingerprint=a.ns.fingerprint, tier=pb.TIER_L1_DRAM))
        got = a.session.load(a.ns, keys)
        assert assert_exact_or_missing(got, data, "corrupt") == 5
        assert list(got) == [True, True, False, True, True, True]
        assert l3(a).quarantined_files == 1
        assert (shared.roots[1] / ".quarantine").is_dir()
        assert a.session.lookup(a.ns, keys).hit_blocks == 2
    finally:
        a.close()


def test_full_brick_fails_writes_visibly_and_the_daemon_serves(cluster, workdir) -> None:
    """A 24 MiB brick; 500 blocks (34 MiB of files) with a 256 MiB L3 cap."""
    vol = cluster.volume("full", mounts=1, brick_bytes=24 * MIB)
    root = vol.mounts[0] / "l3"
    root.mkdir()
    salt, keys, data = fresh_salt("full"), chain_keys("full", 500), blocks(43, 500)
    a = Node(workdir, gl_settings(root, **{"l3.capacity": "256MiB"}), salt, "a")
    try:
        assert store_in_batches(a, keys, data) == 500  # L1 takes them all
        assert wait_l3_idle(a), l3(a)
        t = l3(a)
        assert t.write_errors + t.dropped_writes > 0, t
        assert t.written_blocks < 500, t
        assert t.written_blocks + t.write_errors + t.dropped_writes >= 500, t
        assert t.state == "degraded" and t.effective_capacity_bytes < 256 * MIB, t
        assert a.daemon.running()
        got = a.session.load(a.ns, keys[:100])
        assert assert_exact_or_missing(got, data[:100], "L1") == 100
        files = [p for p in root.rglob("*.kv") if ".quarantine" not in p.parts]
        assert {p.stat().st_size for p in files} <= {FILE_BYTES}
        assert not list(root.rglob("*.tmp.*")), "failed writes left temp files"
        list(a.client.clear(fingerprint=a.ns.fingerprint, tier=pb.TIER_L1_DRAM))
        got = a.session.load(a.ns, keys)
        assert assert_exact_or_missing(got, data, "after ENOSPC") >= len(files) // 2
    finally:
        a.close()


# ---------------------------------------------------------------------- the shared cap

CAP = 32 * MIB


def test_two_writers_under_a_small_cap(shared, workdir) -> None:
    """Two daemons write 400 blocks each (54 MiB of files) under a 32 MiB cap. The shared
    usage ledger admits a write only with room in it, so the directory on the brick stays
    within 1.1x the cap at every sample (it peaked at 2.2-2.7x with trimming alone); what
    does not fit is refused and counted with the dropped writes, never lost silently."""
    salt = fresh_salt("cap")
    settings = {"l3.capacity": "32MiB"}
    nodes = [Node(workdir, gl_settings(shared.roots[i], **settings), salt, n)
             for i, n in enumerate("ab")]
    try:
        with UsageSampler(shared) as sampler:
            threads = [threading.Thread(target=store_in_batches, args=(
                n, chain_keys(f"cap-{i}", 400), blocks(50 + i, 400))) for i, n in enumerate(nodes)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert all(wait_l3_idle(n) for n in nodes)
            writes_done = time.monotonic() - sampler.t0
        infos = [l3(n) for n in nodes]
        written = sum(t.written_blocks for t in infos)
        dropped = sum(t.dropped_writes for t in infos)
        assert written + dropped == 800, \
            f"{infos}\n" + "\n".join(log_warnings(n) for n in nodes)
        assert sum(t.evictions for t in infos) > 0, infos
        at, peak = sampler.peak()
        over = sampler.over(int(CAP * 1.1))
        print(f"\ncap {CAP >> 20} MiB, 2 writers: peak {peak / CAP:.2f}x at {at:.1f}s; "
              f"{len(over)} of {len(sampler.samples)} samples over 1.1x; written {written}, "
              f"refused or dropped {dropped}; writes done at {writes_done:.1f}s")
        assert not over, f"over 1.1x the cap at {[(round(t, 1), b / CAP) for t, b, _ in over]}"
    finally:
        close_all(*nodes)


def test_two_writer_starts_never_make_the_tier_read_only(volume, workdir) -> None:
    """Issue 46 item 8: two daemons started together on a fresh directory write the same
    keys, so both create the same hash directories through their own mounts at once (EEXIST,
    then ESTALE / ENOENT for a moment). Seen once in 17 starts: both tiers read-only for
    30 s, ~95 % of the writes dropped. A directory race is never a tier failure: over
    KVSTRATA_GLUSTER_STARTS starts (default 4) no daemon logs a read-only episode."""
    starts = int(os.environ.get("KVSTRATA_GLUSTER_STARTS", "4"))
    keys, data = chain_keys("mkdir-race", 128), blocks(70, 128)
    episodes, dropped = [], 0
    for start in range(starts):
        shared = SharedDir(volume, f"mkdir-race-{start}-{next(_dirs)}")
        salt = fresh_salt(f"race{start}")
        nodes = [Node(workdir, gl_settings(shared.roots[i]), salt, n)
                 for i, n in enumerate("ab")]
        try:
            threads = [threading.Thread(target=store_in_batches, args=(n, keys, data, 16))
                       for n in nodes]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert all(wait_l3_idle(n) for n in nodes)
            for n in nodes:
                info = l3(n)
                dropped += info.dropped_writes
                log = n.daemon.log_path.read_text(errors="replace")
                if "read-only for" in log or info.state == "read-only":
                    episodes.append((start, info.state, log_warnings(n)))
        finally:
            close_all(*nodes)
    print(f"\n{starts} two-writer starts: {len(episodes)} read-only episodes, "
          f"{dropped} of {2 * 128 * starts} writes dropped")
    assert not episodes, episodes


# ---------------------------------------------------------------------- the usage ledger


def ledger_hammer() -> Path:
    """$KVSTRATA_LEDGER_HAMMER, else usage_ledger_hammer in kvstratad's build tree, else in
    build/; fails the test with a hint when absent."""
    env = os.environ.get("KVSTRATA_LEDGER_HAMMER")
    tail = Path("tests") / "integration" / "usage_ledger_hammer"
    candidates = [Path(env)] if env else [daemon_binary().parents[2] / tail,
                                          REPO / "build" / tail]
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    pytest.fail("usage_ledger_hammer not found at " + " or ".join(map(str, candidates)) +
                ": build it (cmake --build build --target usage_ledger_hammer) or set "
                "KVSTRATA_LEDGER_HAMMER", pytrace=False)


def ledger_bytes_on_brick(shared: SharedDir) -> int:
    text = (shared.on_brick / ".kvstrata-usage").read_bytes().rstrip(b"\0").decode()
    found = re.search(r"^bytes (\d+)$", text, re.M)
    assert found, f"the ledger does not parse: {text[:200]!r}"
    return int(found.group(1))


def test_usage_ledger_loses_no_update(volume) -> None:
    """Issue 46 item 9: two processes, one per mount, each make 150 ledger reservations at
    once (KVSTRATA_LEDGER_UPDATES) through the daemon's own SharedUsage (usage_ledger_hammer);
    the ledger on the brick must then hold every granted byte. KVSTRATA_LEDGER_ROUNDS rounds
    (default 6; the issue's long run: 20 rounds of 500 updates per mount):
    the even ones on a new directory (a ledger both mounts create at once), each odd one on
    the ledger the round before left, 1.2 s later (past the FUSE client's 1 s caches, so
    each process's first open looks the file up again, as a daemon's open does between its
    updates). Without the truncate under the lock before the read
    (block_file_system.cc), a mount's first read returned the file from before the other
    mount's last update (quick-read's cached contents; the kernel's cached size, 0, of a
    file just created): 837 of 7,200 updates lost over 4 runs of this test, in 22 of its
    24 rounds (both kinds); none since in 5 runs."""
    hammer, rounds = ledger_hammer(), int(os.environ.get("KVSTRATA_LEDGER_ROUNDS", "6"))
    updates, want = int(os.environ.get("KVSTRATA_LEDGER_UPDATES", "150")), 4096
    lost: List[Tuple[str, int]] = []
    for r in range(rounds):
        if r % 2 == 0:
            shared, expected, kind = SharedDir(volume, f"ledger-{r}-{next(_dirs)}"), 0, "new"
        else:
            time.sleep(1.2)
            kind = "existing"
        procs = [subprocess.Popen([str(hammer), f"--root={root}", f"--holder=mount{i}",
                                   f"--updates={updates}", f"--want={want}"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for i, root in enumerate(shared.roots)]
        outs = [p.communicate(timeout=60) for p in procs]
        for p, (out, err) in zip(procs, outs):
            assert p.returncode == 0, f"usage_ledger_hammer exited {p.returncode}: {out} {err}"
        granted = sum(int(out.split()[3]) for out, _ in outs)  # "granted N bytes B ..."
        assert granted == 2 * updates * want, outs
        on_brick = ledger_bytes_on_brick(shared)
        lost.append((kind, (expected + granted - on_brick) // want))
        expected = on_brick  # the next round counts its own losses only
    total = sum(n for _, n in lost)
    print(f"\n{rounds} rounds of 2 x {updates} ledger updates from two mounts: {total} lost "
          f"(per round: {lost})")
    assert total == 0, f"ledger updates lost per round: {lost}"
