"""A daemon configured with its own [[tiers]] list (issue 45 Part 1: tiers as data): two
tiers labelled "nvme" (local-file) and "team" (shared-file). Their labels, not L2/L3, are
what `kvstrata tiers`, the metrics, `--tier` and `lookup` show; blocks go down to both and
come back up from the first. A bad list stops the daemon at start, naming the key.
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import grpc
import numpy as np
import pytest

import kvstrata
from kvs_testing import Daemon, assert_code, daemon_binary, wait_until
from prom_text import scrape
from tier_helpers import BLOCK, block_files, blocks, fresh_salt, spec

NVME, TEAM, HDD = 2, 3, 4  # wire numbers: the tiers' ids (1, 2, 3 in the list's order) + 1

LIST = """
[[tiers]]
label = "nvme"
kind = "local-file"
path = "{root}/nvme"
capacity = "256MiB"

[[tiers]]
label = "team"
kind = "shared-file"
path = "{root}/team"
capacity = "256MiB"
eviction_interval_ms = 200

[[tiers]]
label = "hdd"
kind = "local-file"
path = "{root}/hdd"
capacity = "256MiB"
"""


def start(workdir: Path, text: str) -> Daemon:
    config = workdir / "kvstrata.toml"
    config.write_text(text.format(root=workdir))
    d = Daemon(workdir, socket=workdir / "t.sock")
    # The list replaces the default one: no l2 for --set to name.
    d.args = [str(daemon_binary()), f"--socket={d.socket}", "--metrics_address=127.0.0.1:0",
              f"--config={config}", "--set=l1.capacity=64MiB"]
    return d.start()


def info(client: kvstrata.Client, wire: int):
    return next(t for t in client.list_tiers().tiers if t.tier == wire)


def test_a_tier_list_is_known_by_its_labels_everywhere(workdir: Path, cli) -> None:
    d = start(workdir, LIST)
    client = d.client(timeout=30.0)
    session = kvstrata.Session(client, client_name="pytest-tier-list")
    try:
        ns = session.register_namespace(**spec(fresh_salt("list")))
        keys = [f"list-{i}".encode().ljust(32, b"\0") for i in range(4)]
        data = blocks(21, 4)
        session.store(ns, keys, data)
        assert wait_until(lambda: all(info(client, t).written_blocks >= 4
                                      for t in (NVME, TEAM, HDD)), 20.0), client.list_tiers()
        assert len(block_files(workdir / "nvme")) == 4
        assert len(block_files(workdir / "team")) == 4

        listed = json.loads(cli(d, "--json", "tiers").stdout)["tiers"]
        assert [(t["name"], t["kind"]) for t in listed] == [
            ("l1", "memory"), ("nvme", "local-file"), ("team", "shared-file"),
            ("hdd", "local-file")], listed
        assert [t.get("shared", False) for t in listed] == [False, False, True, False]
        assert "team" in cli(d, "tiers").stdout

        metrics = scrape(client.get_status().metrics_address)
        assert metrics.value("kvstrata_tier_blocks", tier="nvme") == 4
        assert metrics.value("kvstrata_transfer_bytes_total", direction="l1_to_nvme") == 4 * BLOCK
        assert metrics.value("kvstrata_transfer_bytes_total", direction="l1_to_team") == 4 * BLOCK
        assert metrics.value("kvstrata_transfer_bytes_total", direction="l1_to_hdd") == 4 * BLOCK
        assert metrics.get("kvstrata_tier_blocks", tier="l2") is None
        assert metrics.get("kvstrata_transfer_bytes_total", direction="l1_to_l2") is None

        fp, hexes = ns.fingerprint, [k.hex() for k in keys]
        assert cli(d, "evict", "--tier=l1", fp, *hexes).returncode == 0
        where = cli(d, "lookup", fp, *hexes)
        assert where.stdout.count(" nvme") == 4, where.stdout  # the fastest tier holding each
        got = session.load(ns, keys)  # promoted from nvme
        assert list(got) == [True] * 4, client.list_tiers()
        assert all(np.array_equal(b, want) for b, want in zip(got.blocks, data))

        # Every lower tier's files by label, the third (wire 4) too.
        doc = json.loads(cli(d, "--json", "evict", fp, hexes[3]).stdout)
        assert doc["tier_blocks"] == {"nvme": 1, "team": 1, "hdd": 1}, doc
        out = cli(d, "evict", "--tier=team", fp, hexes[0])
        assert out.returncode == 0 and "team 1" in out.stdout, out.stdout
        assert len(block_files(workdir / "team")) == 2
        out = cli(d, "clear", "--tier=nvme", fp)
        assert out.returncode == 0, out.stderr
        assert block_files(workdir / "nvme") == []
        # A tier number past the daemon's table is a bad argument, one of an off tier is not.
        with pytest.raises(kvstrata.KVStrataError) as excinfo:
            client.evict(fingerprint=fp, keys=keys[:1], tier=7)
        assert_code(excinfo, grpc.StatusCode.INVALID_ARGUMENT)
        assert "unknown tier 7: this daemon has 4 tiers" in str(excinfo.value)
        bad = cli(d, "clear", "--tier=l2", fp)
        assert bad.returncode == 1 and "expected one of all, l1, nvme, team, hdd" in bad.stderr, \
            bad.stderr

        # The Python client learns the tiers from the daemon's table: a hit in the fourth
        # tier (wire 4, beyond the Tier enum) comes with its label; L1-L3 stay Tier members.
        for where in ("l1", "team"):
            assert cli(d, "evict", f"--tier={where}", fp, hexes[1]).returncode == 0
        hit = session.lookup(ns, keys[1:2])
        assert hit.hit_blocks == 1 and hit.tiers == [HDD], hit
        assert isinstance(hit.tiers[0], kvstrata.DaemonTier), hit.tiers
        assert (str(hit.tiers[0]), hit.tiers[0].kind) == ("hdd", "local-file")
        assert session.lookup(ns, keys[2:3]).tiers == [kvstrata.Tier.L1]
        table = session.tier_table()
        assert [(e.label, e.kind, e.shared) for e in table] == [
            ("l1", "memory", False), ("nvme", "local-file", False), ("team", "shared-file", True),
            ("hdd", "local-file", False)]
        assert table.get(NVME).tier is kvstrata.Tier.L2 and table.by_label("hdd").tier == HDD
    finally:
        session.close()
        client.close()
        assert d.stop() == 0, d.log_tail()


def test_a_bad_tier_list_stops_the_start_naming_the_key(workdir: Path) -> None:
    config = workdir / "bad.toml"
    config.write_text('[[tiers]]\nlabel = "a"\nkind = "local-file"\npath = "/x"\n'
                      '[[tiers]]\nlabel = "a"\nkind = "tape"\n')
    proc = subprocess.run([str(daemon_binary()), f"--config={config}", "--check_config"],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode != 0
    assert "'tiers[1].kind': got the string \"tape\"" in proc.stderr, proc.stderr
