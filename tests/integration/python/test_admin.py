"""Admin API over the real socket: status, tiers, config, stats and the gRPC health check."""
from __future__ import annotations

import os
import shutil
import time

import grpc
import pytest

import kvstrata
from kvstrata import pb
from kvs_testing import L1_CAPACITY, Daemon, assert_code, mha_spec, short_tmpdir

MIB = 1 << 20


def parse_bytes(text: str) -> int:
    """'64MiB', '67108864', '64 MiB' -> bytes."""
    units = {"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}
    t = text.strip().lower().replace(" ", "")
    num = t.rstrip("abcdefghijklmnopqrstuvwxyz")
    return int(float(num) * units[t[len(num):]])


def test_health_check_serving(client: kvstrata.Client) -> None:
    assert client.health_check() == 1  # SERVING
    assert client.is_serving()


def test_health_check_unknown_service(client: kvstrata.Client) -> None:
    with pytest.raises(kvstrata.KVStrataError) as exc:
        client.health_check("no.such.Service")
    assert_code(exc, grpc.StatusCode.NOT_FOUND)


def test_get_status(daemon, client: kvstrata.Client, session: kvstrata.Session) -> None:
    status = client.get_status()
    assert status.version and status.version == session.open_response.daemon_version
    assert status.instance_id == session.daemon_instance_id
    assert status.pid == daemon.proc.pid
    assert status.uptime_ms > 0
    assert abs(status.start_time_unix_ms + status.uptime_ms - time.time() * 1000) < 60_000
    assert any(l.kind == "unix" and l.address == str(daemon.socket) for l in status.listeners), \
        status.listeners
    assert status.sessions >= 1
    assert status.config_path == ""
    host, _, port = status.metrics_address.rpartition(":")
    assert host == "127.0.0.1" and int(port) > 0, "metrics_address should name the bound port"
    time.sleep(0.02)
    assert client.get_status().uptime_ms > status.uptime_ms


def test_tiers(client: kvstrata.Client) -> None:
    status_tiers = {t.tier: t for t in client.get_status().tiers}
    listed = {t.tier: t for t in client.list_tiers().tiers}
    assert set(status_tiers) == set(listed)
    l1 = listed[pb.TIER_L1_DRAM]
    assert (l1.name, l1.enabled, l1.path) == ("l1", True, "")
    assert l1.capacity_bytes == L1_CAPACITY
    assert l1.used_bytes <= l1.capacity_bytes
    assert l1.eviction_policy in ("lru", "arc", "s3fifo")
    assert l1.state == "ok"
    for tier in (pb.TIER_L2_LOCAL, pb.TIER_L3_SHARED):
        if tier in listed:
            assert not listed[tier].enabled and listed[tier].state == "disabled"


def test_get_config(daemon, client: kvstrata.Client) -> None:
    config = client.get_config()
    entries = {e.key: e for e in config.entries}
    assert parse_bytes(entries["l1.capacity"].value) == 64 * MIB
    assert entries["l1.capacity"].source == "flag"
    assert entries["l2.enabled"].value == "false" and entries["l2.enabled"].source == "flag"
    assert entries["server.socket"].value == str(daemon.socket)
    assert entries["l1.eviction_policy"].source == "default"
    assert {e.source for e in config.entries} <= {"default", "file", "flag"}
    assert "[l1]" in config.toml


def test_get_stats(client: kvstrata.Client) -> None:
    stats = client.get_stats()
    names = [c.name for c in stats.counters]
    assert len(names) == len(set(names)) and all(names)
    assert {t.tier for t in stats.tiers} == {t.tier for t in client.list_tiers().tiers}


def test_get_stats_totals_count_without_the_metrics_endpoint() -> None:
    """`kvstrata top`'s rates come from GetStats' running totals, metrics page on or off."""
    d = Daemon(short_tmpdir())
    d.args = [a if not a.startswith("--metrics_address=") else "--metrics_address=off"
              for a in d.args]
    d.start()
    try:
        with d.client(timeout=10.0) as c, kvstrata.Session(c, client_name="totals") as s:
            assert c.get_status().metrics_address == ""
            ns = s.register_namespace(**mha_spec(kv_layout="opaque", dtype="uint8",
                                                 opaque_block_bytes=4096, salt="totals"))

            def totals() -> dict:
                return {t.name: t.value for t in c.get_stats().counters}

            before = totals()
            for _ in range(7):
                s.lookup(ns, [b"\x01", b"\x02"])
            after = totals()
    finally:
        d.stop()
        shutil.rmtree(d.workdir, ignore_errors=True)
    assert after["lookups"] - before["lookups"] == 7
    assert after["lookup_blocks"] - before["lookup_blocks"] == 14
    routes = ("gpu_to_l1", "l1_to_gpu", "l1_to_l2", "l2_to_l1", "l1_to_l3", "l3_to_l1")
    assert {f"transfer_bytes_{r}" for r in routes} <= set(after)


def test_list_sessions_reports_the_client(client: kvstrata.Client) -> None:
    with kvstrata.Session(client, client_name="pytest-admin", hostname="node-c") as s:
        info = {x.session_id: x for x in client.list_sessions().sessions}[s.session_id]
        assert (info.client_name, info.hostname, info.pid) == ("pytest-admin", "node-c", os.getpid())
        assert abs(info.opened_unix_ms - time.time() * 1000) < 60_000
        assert (info.namespaces, info.registrations) == (0, 0)
        s.register_namespace(**mha_spec(model="kvstrata-test/admin-sessions"))
        info = {x.session_id: x for x in client.list_sessions().sessions}[s.session_id]
        assert (info.namespaces, info.registrations) == (1, 0)  # it was always 0 before
