"""L2 (local directory) and L3 (shared directory) tiers on real kvstratad processes and real
files: persistence across restarts, two daemons sharing one L3 root, concurrent writers of
one key, capacity caps (the shared one with two daemons), promotion, write-back, drain (the
faults: test_tier_faults.py).

Every test has its own work directory, daemons and namespace salt.
"""
from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path
from typing import List

import numpy as np

from kvstrata import pb
from host_child import chain_keys
from kvs_testing import wait_until
from prom_text import scrape
from tier_helpers import (FILE_BYTES, MIB, Node, assert_loads, block_files, blocks, fresh_salt,
                          l2_settings, l3_settings, tier, wait_written)


# ---------------------------------------------------------------------- persistence


def test_store_restart_load_from_l2_byte_exact(workdir: Path) -> None:
    salt, l2 = fresh_salt("restart"), workdir / "l2"
    keys, data = chain_keys("restart", 24), blocks(1, 24)
    a = Node(workdir, l2_settings(l2), salt)
    assert a.session.store(a.ns, keys, data).stored == 24
    wait_written(a.client, pb.TIER_L2_LOCAL, 24)
    assert len(block_files(l2)) == 24
    a.close()

    b = Node(workdir, l2_settings(l2), salt)
    try:
        hit = b.session.lookup(b.ns, keys, lease=True)
        assert hit.hit_blocks == 24 and hit.tiers == [pb.TIER_L2_LOCAL] * 24
        assert hit.lease_id != 0, "a lookup that finds L2 blocks leases them as they land"
        assert_loads(b, keys, data, lease_id=hit.lease_id)
        again = b.session.lookup(b.ns, keys)
        assert again.tiers == [pb.TIER_L1_DRAM] * 24, "promoted into L1"
        t = tier(b.client, pb.TIER_L2_LOCAL)
        assert t.promoted_blocks == 24 and t.index_warm and t.blocks == 24
    finally:
        b.close()


def test_load_without_lookup_promotes_and_waits(workdir: Path) -> None:
    salt, l2 = fresh_salt("direct-load"), workdir / "l2"
    keys, data = chain_keys("direct", 8), blocks(2, 8)
    a = Node(workdir, l2_settings(l2), salt)
    a.session.store(a.ns, keys, data)
    wait_written(a.client, pb.TIER_L2_LOCAL, 8)
    a.close()
    b = Node(workdir, l2_settings(l2), salt)
    try:
        assert_loads(b, keys, data)
    finally:
        b.close()


def test_chain_continues_from_l1_into_l2(workdir: Path) -> None:
    """Blocks evicted from a small L1 are still found (in L2) after the L1 prefix."""
    salt, l2 = fresh_salt("mixed"), workdir / "l2"
    settings = l2_settings(l2, **{"l1.capacity": "8MiB", "l1.slab_size": "1MiB"})
    a = Node(workdir, settings, salt)
    try:
        keys, data = chain_keys("mixed", 200), blocks(3, 200)  # 12.5 MiB > L1
        for i in range(0, 200, 20):
            a.session.store(a.ns, keys[i:i + 20], data[i:i + 20])
        wait_written(a.client, pb.TIER_L2_LOCAL, 200)
        hit = a.session.lookup(a.ns, keys)
        assert hit.hit_blocks == 200, hit
        # Mostly the oldest blocks left L1 (a few were pinned by the writer at the time).
        assert hit.tiers.count(pb.TIER_L2_LOCAL) >= 50 and hit.tiers[-1] == pb.TIER_L1_DRAM
        assert_loads(a, keys[:40], data[:40])
    finally:
        a.close()


# ---------------------------------------------------------------------- the shared tier


def test_two_daemons_share_l3(workdir: Path) -> None:
    salt, shared = fresh_salt("share"), workdir / "l3"
    keys, data = chain_keys("share", 16), blocks(4, 16)
    a = Node(workdir, l3_settings(shared), salt, "a")
    b = Node(workdir, l3_settings(shared), salt, "b")
    try:
        assert b.session.lookup(b.ns, keys).hit_blocks == 0
        a.session.store(a.ns, keys, data)
        wait_written(a.client, pb.TIER_L3_SHARED, 16)
        assert (shared / a.ns.fingerprint / "namespace.json").is_file()
        # b's negative cache forgets the earlier misses within l3.negative_cache_ms (2 s).
        assert wait_until(lambda: b.session.lookup(b.ns, keys).hit_blocks == 16, 10.0)
        hit = b.session.lookup(b.ns, keys, lease=True)
        assert hit.tiers == [pb.TIER_L3_SHARED] * 16
        assert_loads(b, keys, data, lease_id=hit.lease_id)
    finally:
        b.close()
        a.close()


def test_concurrent_writers_of_one_key(workdir: Path) -> None:
    """Two daemons write the same keys at once, with different bytes: every file a reader
    finds is one writer's complete block, never a mix, and no temp file is left."""
    salt, shared = fresh_salt("race"), workdir / "l3"
    keys = chain_keys("race", 32)
    versions = [blocks(10, 32), blocks(11, 32)]
    nodes = [Node(workdir, l3_settings(shared), salt, n) for n in ("a", "b")]
    try:
        for round_ in range(3):
            threads = [threading.Thread(target=n.session.store, args=(n.ns, keys, v))
                       for n, v in zip(nodes, versions)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            for n in nodes:
                wait_written(n.client, pb.TIER_L3_SHARED, 1 + round_)
                # Forget L1 and the files so the next round writes every key again.
                list(n.client.clear(fingerprint=n.ns.fingerprint, tier=pb.TIER_L1_DRAM))
            if round_ < 2:
                list(nodes[0].client.clear(fingerprint=nodes[0].ns.fingerprint,
                                           tier=pb.TIER_L3_SHARED))
        reader = Node(workdir, l3_settings(shared), salt, "r")
        try:
            hit = reader.session.lookup(reader.ns, keys, lease=True)
            assert hit.hit_blocks == 32
            got = reader.session.load(reader.ns, keys, lease_id=hit.lease_id)
            assert list(got) == [True] * 32
            for i, b in enumerate(got.blocks):
                assert any(np.array_equal(b, v[i]) for v in versions), f"block {i} is torn"
        finally:
            reader.close()
        assert not [p for p in shared.rglob("*.tmp.*")], "temp files left behind"
    finally:
        for n in nodes:
            n.close()


# ---------------------------------------------------------------------- capacity


def disk_bytes(root: Path) -> int:
    total = 0
    for p in block_files(root):
        try:
            total += p.stat().st_size
        except FileNotFoundError:  # evicted while we walk
            pass
    return total


def json_docs(text: str) -> List[dict]:
    """The JSON objects `kvstrata --json` printed one after another."""
    decoder, docs, pos = json.JSONDecoder(), [], 0
    while pos < len(text):
        if text[pos].isspace():
            pos += 1
            continue
        doc, pos = decoder.raw_decode(text, pos)
        docs.append(doc)
    return docs


def test_l2_capacity_is_enforced(workdir: Path) -> None:
    salt, l2 = fresh_salt("l2cap"), workdir / "l2"
    a = Node(workdir, l2_settings(l2, **{"l2.capacity": "2MiB"}), salt)
    try:
        keys, data = chain_keys("l2cap", 100), blocks(5, 100)  # 6.8 MiB of files
        for i in range(0, 100, 10):
            a.session.store(a.ns, keys[i:i + 10], data[i:i + 10])
        assert wait_until(lambda: tier(a.client, pb.TIER_L2_LOCAL).queue_depth == 0, 20.0)
        t = tier(a.client, pb.TIER_L2_LOCAL)
        assert t.used_bytes <= 2 * MIB and t.evictions > 0
        assert disk_bytes(l2) <= 2 * MIB
        assert len(block_files(l2)) == t.blocks
    finally:
        a.close()


def test_l3_capacity_is_enforced_across_two_daemons(workdir: Path) -> None:
    """Two daemons offer 120 blocks (~3.7x a 2 MiB cap). A write takes room in the shared
    usage ledger first, so what does not fit is refused and counted (dropped_writes), and
    the trims (whichever daemon holds the eviction lock) delete the oldest files."""
    salt, shared = fresh_salt("l3cap"), workdir / "l3"
    settings = l3_settings(shared, **{"l3.capacity": "2MiB"})
    a = Node(workdir, settings, salt, "a")
    b = Node(workdir, settings, salt, "b")
    try:
        peak = 0
        for n, name in ((a, "l3cap-a"), (b, "l3cap-b")):
            keys, data = chain_keys(name, 60), blocks(6, 60)
            for i in range(0, 60, 10):
                n.session.store(n.ns, keys[i:i + 10], data[i:i + 10])
                peak = max(peak, disk_bytes(shared))
        for n in (a, b):
            assert wait_until(lambda: tier(n.client, pb.TIER_L3_SHARED).queue_depth == 0, 20.0)
        assert disk_bytes(shared) <= 2 * MIB and peak <= 2 * MIB, (disk_bytes(shared), peak)
        infos = [tier(n.client, pb.TIER_L3_SHARED) for n in (a, b)]
        written = sum(t.written_blocks for t in infos)
        assert written + sum(t.dropped_writes for t in infos) == 120, infos
        # The full ledger asked for a trim (at once, or at the next round on a busy machine).
        assert wait_until(lambda: sum(tier(n.client, pb.TIER_L3_SHARED).evictions
                                      for n in (a, b)) > 0, 10.0), infos
        # Oldest-written first: a's first block was the first to go.
        first = chain_keys("l3cap-a", 60)[0].hex()
        assert not any(p.name == f"{first}.kv" for p in block_files(shared)), "oldest kept"
        # The trims made room: a new block lands.
        a.session.store(a.ns, chain_keys("l3cap-late", 1), blocks(9, 1))
        assert wait_until(lambda: tier(a.client, pb.TIER_L3_SHARED).written_blocks
                          > infos[0].written_blocks, 10.0), tier(a.client, pb.TIER_L3_SHARED)
        assert disk_bytes(shared) <= 2 * MIB
    finally:
        b.close()
        a.close()


def test_a_full_l3_queue_keeps_new_blocks_for_their_first_hit(workdir: Path) -> None:
    """backlog_policy "defer" (the default): a block stored while the write queue is full
    waits in L1 for a hit; a lookup that hits it queues it; one that leaves L1 first is shed
    (counted: tier status and kvstrata_stores_dropped_total{reason="shed"}), not dropped."""
    salt, shared = fresh_salt("defer"), workdir / "l3"
    a = Node(workdir, l3_settings(shared, **{"l3.write_queue_blocks": "8", "l3.io_threads": "1"}),
             salt, "a")
    try:
        keys, data = chain_keys("defer", 100), blocks(12, 100)
        assert a.session.store(a.ns, keys, data).stored == 100
        assert wait_until(lambda: tier(a.client, pb.TIER_L3_SHARED).queue_depth == 0, 20.0)
        t = tier(a.client, pb.TIER_L3_SHARED)
        assert t.deferred_writes >= 80 and t.dropped_writes == 0, t
        assert t.written_blocks + t.deferred_writes == 100, t
        written = {p.name for p in block_files(shared)}
        reused = [k for k in keys if f"{k.hex()}.kv" not in written][:5]
        assert a.session.lookup(a.ns, reused).hit_blocks == 5  # L1 hits
        assert wait_until(lambda: tier(a.client, pb.TIER_L3_SHARED).written_blocks
                          == t.written_blocks + 5, 20.0), tier(a.client, pb.TIER_L3_SHARED)
        on_disk = {p.name for p in block_files(shared)}
        assert all(f"{k.hex()}.kv" in on_disk for k in reused)
        list(a.client.clear(fingerprint=a.ns.fingerprint, tier=pb.TIER_L1_DRAM))
        after = tier(a.client, pb.TIER_L3_SHARED)
        assert after.deferred_writes == 0 and after.shed_writes == t.deferred_writes - 5, after
        assert after.dropped_writes == 0, after
        m = scrape(a.client.get_status().metrics_address)
        assert m.value("kvstrata_stores_dropped_total", tier="l3", reason="shed") == \
            after.shed_writes
        assert m.value("kvstrata_tier_deferred_writes", tier="l3") == 0
    finally:
        a.close()


# ---------------------------------------------------------------------- write-back and drain


def test_write_back_writes_on_eviction_and_drain_flushes(workdir: Path, cli) -> None:
    salt, l2 = fresh_salt("wb"), workdir / "l2"
    settings = l2_settings(l2, **{"l2.write_policy": "write-back", "l1.capacity": "8MiB",
                                  "l1.slab_size": "1MiB"})
    a = Node(workdir, settings, salt)
    try:
        keys, data = chain_keys("wb", 10), blocks(7, 10)
        a.session.store(a.ns, keys, data)
        time.sleep(0.3)
        assert tier(a.client, pb.TIER_L2_LOCAL).written_blocks == 0, "write-back: nothing yet"
        # Eviction pressure pushes the first blocks out of L1: they are written down.
        more = chain_keys("wb-more", 150)
        for i in range(0, 150, 15):
            a.session.store(a.ns, more[i:i + 15], blocks(8, 15))
        # The evicted blocks load once their writes landed (a block evicted with its write
        # still queued is a miss until then: under CPU load the queue can lag).
        assert wait_until(lambda: tier(a.client, pb.TIER_L2_LOCAL).written_blocks > 0 and
                          tier(a.client, pb.TIER_L2_LOCAL).queue_depth == 0, 10.0)
        assert_loads(a, keys, data)
        # Drain writes what L1 still holds and L2 lacks, with progress.
        out = cli(a.daemon, "--json", "drain")
        assert out.returncode == 0, out.stderr
        last = json_docs(out.stdout)[-1]
        assert last["done"] is True and "wrote" in last["message"]
        l1_blocks = tier(a.client, pb.TIER_L1_DRAM).blocks
        assert tier(a.client, pb.TIER_L2_LOCAL).blocks >= l1_blocks
        human = cli(a.daemon, "drain", "--tier=l2")
        assert human.returncode == 0 and "100%" in human.stdout, human.stdout
    finally:
        a.close()


def test_drain_without_lower_tiers_is_a_clear_error(workdir: Path, cli) -> None:
    a = Node(workdir, {}, fresh_salt("nodrain"))
    try:
        out = cli(a.daemon, "drain")
        assert out.returncode == 3 and "no lower tier" in out.stderr, out.stderr
    finally:
        a.close()


def test_drain_to_a_tier_not_enabled_names_the_setting(workdir: Path, cli) -> None:
    """L2 only, `drain --tier=l3`: the error speaks the configuration's words (no proto
    enum name)."""
    a = Node(workdir, l2_settings(workdir / "l2"), fresh_salt("nol3"))
    try:
        out = cli(a.daemon, "drain", "--tier=l3")
        assert out.returncode != 0 and "the l3 tier is not enabled in this daemon (set " \
            "l3.enabled = true" in out.stderr, out.stderr
        assert "TIER_L3_SHARED" not in out.stderr
    finally:
        a.close()


def test_cli_tiers_lookup_evict_and_clear_on_l2(workdir: Path, cli) -> None:
    salt, l2 = fresh_salt("cli"), workdir / "l2"
    a = Node(workdir, l2_settings(l2), salt)
    try:
        keys, data = chain_keys("cli", 4), blocks(9, 4)
        a.session.store(a.ns, keys, data)
        wait_written(a.client, pb.TIER_L2_LOCAL, 4)
        table = cli(a.daemon, "tiers")
        assert table.returncode == 0 and "QUEUE" in table.stdout and "l2" in table.stdout
        listed = json.loads(cli(a.daemon, "--json", "tiers").stdout)
        l2_info = next(t for t in listed["tiers"] if t["name"] == "l2")
        assert l2_info["state"] == "ok" and int(l2_info["blocks"]) == 4
        fp = a.ns.fingerprint
        assert cli(a.daemon, "evict", "--tier=l1", fp, *[k.hex() for k in keys]).returncode == 0
        where = cli(a.daemon, "lookup", fp, keys[0].hex())
        assert "l2" in where.stdout, where.stdout
        out = cli(a.daemon, "evict", "--tier=l2", fp, keys[0].hex())
        assert out.returncode == 0 and "evicted 1" in out.stdout, out.stdout
        assert len(block_files(l2)) == 3
        out = cli(a.daemon, "clear", "--tier=l2", fp)
        assert out.returncode == 0 and len(block_files(l2)) == 0, out.stdout
        bad = cli(a.daemon, "clear", "--tier=l3", fp)
        assert bad.returncode == 3 and "not enabled" in bad.stderr, bad.stderr
        usage = cli(a.daemon, "clear", "--tier=l9", fp)
        assert usage.returncode == 1
    finally:
        a.close()


def test_evict_counts_keys_once_per_tier_and_a_pin_keeps_every_copy(workdir: Path, cli) -> None:
    """3 keys in L1 and L2, one pinned: evict reports 2 blocks (2 from l1, 2 from l2), not
    the 4 copies summed, and the pinned block keeps its L2 file too."""
    l2 = workdir / "l2"
    a = Node(workdir, l2_settings(l2), fresh_salt("evictpin"))
    try:
        keys, data = chain_keys("evictpin", 3), blocks(13, 3)
        a.session.store(a.ns, keys, data)
        wait_written(a.client, pb.TIER_L2_LOCAL, 3)
        fp, hexes = a.ns.fingerprint, [k.hex() for k in keys]
        assert cli(a.daemon, "pin", fp, hexes[0]).returncode == 0
        only_l2 = cli(a.daemon, "--json", "evict", "--tier=l2", fp, hexes[0])
        assert only_l2.returncode == 0, only_l2.stderr
        assert json.loads(only_l2.stdout)["evicted_blocks"] == 0
        assert len(block_files(l2)) == 3, "a pinned block's L2 file stays"
        out = cli(a.daemon, "evict", fp, *hexes)
        assert out.returncode == 0, out.stderr
        assert "evicted 2 blocks (l1 2, l2 2); 1 pinned, kept" in out.stdout, out.stdout
        assert len(block_files(l2)) == 1
        where = {line.split()[0]: line.split()[-1]
                 for line in cli(a.daemon, "lookup", fp, *hexes).stdout.splitlines()[1:4]}
        assert where == {hexes[0]: "l1", hexes[1]: "-", hexes[2]: "-"}, where
        assert cli(a.daemon, "unpin", fp, hexes[0]).returncode == 0
        machine = cli(a.daemon, "--json", "evict", fp, *hexes)
        assert machine.returncode == 0, machine.stderr
        doc = json.loads(machine.stdout)
        assert doc == {"evicted_blocks": 1, "l1_blocks": 1, "l2_blocks": 1, "l3_blocks": 0,
                       "pinned_blocks": 0, "tier_blocks": {"l2": 1}}, doc
        assert block_files(l2) == []
    finally:
        a.close()


def test_drain_into_a_pipe_prints_one_consistent_final_line(workdir: Path, cli) -> None:
    settings = l2_settings(workdir / "l2", **{"l2.write_policy": "write-back"})
    a = Node(workdir, settings, fresh_salt("drainpipe"))
    try:
        keys = chain_keys("drainpipe", 5)
        a.session.store(a.ns, keys, blocks(14, 5))
        out = cli(a.daemon, "drain")  # stdout is a pipe here, not a TTY
        assert out.returncode == 0, out.stderr
        assert "\r" not in out.stdout, repr(out.stdout)
        lines = out.stdout.splitlines()
        assert len(lines) == 2, lines  # the final bar, then the summary
        bar = re.search(r"\] 100%  (\d+)/(\d+) blocks$", lines[0])
        assert bar and bar.group(1) == bar.group(2) == "5", lines
        assert lines[1] == "wrote 5 blocks down", lines
        last = json_docs(cli(a.daemon, "--json", "drain").stdout)[-1]
        assert last["done"] is True and last["done_units"] == last["total_units"], last
    finally:
        a.close()
