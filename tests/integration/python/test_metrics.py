"""Prometheus metrics of a real kvstratad: drive traffic (stores into a small L1 so it
evicts, lookups with hits and misses, a drop under leases, admin evict and clear, bad
input) and assert the counters and gauges on its HTTP endpoint. docs/metrics.md lists
every metric; this test also checks that the list and the endpoint agree."""
from __future__ import annotations

import http.client
import re
import shutil
import socket
import time
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest

import kvstrata
from kvs_testing import Daemon, mha_spec, raise_fd_limit, run_daemon, short_tmpdir
from prom_text import Metrics, scrape

BLOCK = 64 << 10
TOKENS = 16
DOC = Path(__file__).resolve().parents[3] / "docs" / "metrics.md"
DIRECTIONS = ["gpu_to_l1", "l1_to_gpu", "l1_to_l2", "l2_to_l1", "l1_to_l3", "l3_to_l1"]


@pytest.fixture(scope="module")
def mdaemon() -> Iterator[Daemon]:
    yield from run_daemon(Daemon(short_tmpdir(), {"l1.capacity": "8MiB", "l1.slab_size": "1MiB"}))


def metrics_of(d: Daemon) -> Metrics:
    with d.client(timeout=10.0) as c:
        return scrape(c.get_status().metrics_address)


def keys_for(seed: int, count: int):
    return [seed.to_bytes(4, "big") + i.to_bytes(28, "big") for i in range(count)]


def blocks(count: int):
    return [np.full(BLOCK, i % 251, np.uint8) for i in range(count)]


def delta(after: Metrics, before: Metrics, name: str, **labels: str) -> float:
    return after.value(name, **labels) - (before.get(name, **labels) or 0.0)


def test_traffic_moves_the_counters(mdaemon: Daemon) -> None:
    before = metrics_of(mdaemon)
    with mdaemon.client(timeout=10.0) as c, kvstrata.Session(c, client_name="metrics") as s:
        ns = s.register_namespace(**mha_spec(kv_layout="opaque", dtype="uint8",
                                             opaque_block_bytes=BLOCK, salt="metrics-1",
                                             tokens_per_block=TOKENS))
        during = metrics_of(mdaemon)
        assert during.value("kvstrata_sessions_active") == 1
        assert during.value("kvstrata_namespaces") >= 1

        first = keys_for(1, 8)
        assert s.store(ns, first, blocks(8)).stored == 8
        hit = s.lookup(ns, first + keys_for(99, 4))             # 8 hits, 4 misses
        assert hit.hit_blocks == 8
        assert s.lookup(ns, keys_for(98, 3)).hit_blocks == 0    # 3 misses
        lookups, asked, hits = 2, 15, 8

        many = keys_for(2, 200)                                 # 12.5 MiB into 8 MiB: evicts
        stored = 8
        for i in range(0, 200, 25):
            stored += s.store(ns, many[i:i + 25], blocks(25)).stored

        # Lease everything that is left, so a further store finds no room: dropped.
        everything = [k for k in first + many]
        present = [k for k in everything if s.lookup(ns, [k]).hit_blocks == 1]
        lookups += len(everything)
        asked += len(everything)
        hits += len(present)
        lease = s.lookup(ns, present, lease=True)
        lookups, asked, hits = lookups + 1, asked + len(present), hits + lease.hit_blocks
        squeezed = s.store(ns, keys_for(3, 40), blocks(40))
        dropped, stored = squeezed.dropped, stored + squeezed.stored
        s.release_lease(lease.lease_id)

        evicted_admin = c.evict(fingerprint=ns.fingerprint, keys=present[:2]).evicted_blocks
        list(c.clear())
        with pytest.raises(kvstrata.KVStrataError):
            c.lookup(session_id=s.session_id, namespace_id=ns.namespace_id, keys=[b""])
        after = metrics_of(mdaemon)
        stored += s.store(ns, keys_for(4, 1), blocks(1)).stored

    assert delta(after, before, "kvstrata_lookups_total") == lookups
    assert delta(after, before, "kvstrata_lookup_blocks_total") == asked
    assert delta(after, before, "kvstrata_hit_blocks_total", tier="l1") == hits
    assert delta(after, before, "kvstrata_hit_tokens_total", tier="l1") == hits * TOKENS
    assert delta(after, before, "kvstrata_hit_blocks_total", tier="l2") == 0
    assert delta(after, before, "kvstrata_blocks_stored_total", tier="l1") == stored - 1
    evictions = delta(after, before, "kvstrata_evictions_total", tier="l1")
    assert evictions > 0
    assert evictions == delta(after, before, "kvstrata_blocks_removed_total", tier="l1",
                              cause="evicted")
    assert delta(after, before, "kvstrata_blocks_removed_total", tier="l1",
                 cause="admin_evict") == evicted_admin == 2
    assert delta(after, before, "kvstrata_blocks_removed_total", tier="l1",
                 cause="cleared") > 0
    assert dropped > 0
    assert delta(after, before, "kvstrata_stores_dropped_total", tier="l1",
                 reason="no_space") == dropped
    assert delta(after, before, "kvstrata_errors_total", kind="rpc_invalid_argument") >= 1
    # The session looks up over the fast-path socket (docs/wire-protocol.md).
    assert after.value("kvstrata_rpc_requests_total", method="FastPath.Lookup", code="OK") > 0
    assert after.value("kvstrata_tier_capacity_bytes", tier="l1") == 8 << 20
    assert after.value("kvstrata_tier_blocks", tier="l1") == 0        # right after the clear
    assert after.value("kvstrata_leases_active") == 0
    assert after.value("kvstrata_sessions_active") == 1
    final = metrics_of(mdaemon)
    assert final.value("kvstrata_sessions_active") == 0
    assert final.value("kvstrata_tier_used_bytes", tier="l1") == BLOCK
    assert final.value("kvstrata_tier_blocks", tier="l1") == 1


def test_every_series_exists_before_traffic(mdaemon: Daemon) -> None:
    m = metrics_of(mdaemon)
    for d in DIRECTIONS:
        assert m.get("kvstrata_transfer_bytes_total", direction=d) is not None
        assert m.get("kvstrata_transfer_duration_seconds_count", direction=d) is not None
        assert m.get("kvstrata_transfer_size_bytes_count", direction=d) is not None
    for tier in ("l1", "l2", "l3"):
        for name in ("kvstrata_hit_blocks_total", "kvstrata_hit_tokens_total",
                     "kvstrata_evictions_total", "kvstrata_blocks_stored_total"):
            assert m.get(name, tier=tier) is not None, (name, tier)
    for name in ("kvstrata_jobs_active", ):
        assert m.get(name, kind="store") is not None and m.get(name, kind="load") is not None
    for name in ("kvstrata_registrations_active", "kvstrata_completions_pending",
                 "kvstrata_leases_active", "kvstrata_reservations_active",
                 "kvstrata_loads_active", "kvstrata_fenced_bytes", "kvstrata_uptime_seconds",
                 "process_open_fds"):
        assert m.get(name) is not None, name


def test_names_types_and_docs_agree(mdaemon: Daemon) -> None:
    m = metrics_of(mdaemon)
    for name in m.types:
        assert name.split("_")[0] in ("kvstrata", "process"), name
        if m.types[name] == "counter":
            assert name.endswith("_total"), f"counter {name} should end in _total"
    documented = set(re.findall(r"^\| `(kvstrata_[a-z0-9_]+)`", DOC.read_text(), re.M))
    exported = {n for n in m.types if n.startswith("kvstrata_")}
    # Families that appear only with some configuration (events) or on first use.
    optional = {"kvstrata_errors_total", "kvstrata_events_queue_depth",
                "kvstrata_tenant_l1_capacity_bytes", "kvstrata_tenant_l1_used_bytes",
                "kvstrata_events_dropped_total",
                "kvstrata_events_published_total", "kvstrata_event_batches_published_total"}
    assert exported - documented == set(), "undocumented metrics"
    assert documented - exported - optional == set(), "documented metrics the daemon lacks"


def test_events_metrics_when_enabled(tmp_path: Path) -> None:
    workdir = short_tmpdir()
    d = Daemon(workdir, {"events.enabled": "true", "events.endpoint": ""}).start()
    try:
        m = metrics_of(d)
        assert m.value("kvstrata_events_enabled") == 1
        assert m.value("kvstrata_events_dropped_total") == 0
        assert m.value("kvstrata_events_queue_depth") == 0
    finally:
        assert d.stop() == 0
        d.kill()
        shutil.rmtree(workdir, ignore_errors=True)


def test_idle_connections_do_not_starve_scrapes(mdaemon: Daemon) -> None:
    """Issue 15: two TCP connections that never send a request made every scrape time out."""
    import socket
    import time
    import urllib.request
    with mdaemon.client(timeout=10.0) as c:
        address = c.get_status().metrics_address
    host, port = address.rsplit(":", 1)
    idle = [socket.create_connection((host, int(port))) for _ in range(8)]
    try:
        start = time.monotonic()
        for _ in range(3):
            with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as response:
                assert b"kvstrata_uptime_seconds" in response.read()
        assert time.monotonic() - start < 5
    finally:
        for s in idle:
            s.close()


IDLE_CONNECTIONS = 1000
SCRAPES = 100


def test_a_thousand_idle_connections_leave_scrapes_fast() -> None:
    """Issue 46: every 16 idle connections held each scrape up for 2 s (16 → 1.5-1.8 s,
    128 → 15.8 s). Target: scrape p99 <= 100 ms with 1,000 idle connections open."""
    limit = raise_fd_limit(IDLE_CONNECTIONS + 512)
    # Both ends need a descriptor per connection, plus what the daemon and pytest hold.
    assert limit >= IDLE_CONNECTIONS + 256, (
        f"RLIMIT_NOFILE {limit} is too low for {IDLE_CONNECTIONS} idle connections")
    workdir = short_tmpdir()
    d = Daemon(workdir, {"l1.capacity": "8MiB", "l1.slab_size": "1MiB"}).start()
    idle: list = []
    try:
        with d.client(timeout=10.0) as c:
            host, port = c.get_status().metrics_address.rsplit(":", 1)
        idle = [socket.create_connection((host, int(port)), timeout=5)
                for _ in range(IDLE_CONNECTIONS)]
        seconds = []
        for i in range(SCRAPES):
            # A new connection per scrape, as a scraper's first one: the case a pool of
            # workers busy with idle connections answered last.
            start = time.monotonic()
            conn = http.client.HTTPConnection(host, int(port), timeout=5)
            try:
                conn.request("GET", "/metrics")
                response = conn.getresponse()
                page = response.read()
            finally:
                conn.close()
            seconds.append(time.monotonic() - start)
            assert response.status == 200 and b"kvstrata_uptime_seconds" in page
        connections = Metrics(page.decode()).value("kvstrata_metrics_connections")
        assert connections >= IDLE_CONNECTIONS, "the idle connections were not all open"
        seconds.sort()
        p50, p99 = seconds[len(seconds) // 2], seconds[int(len(seconds) * 0.99) - 1]
        print(f"{IDLE_CONNECTIONS} idle connections: scrape p50 {p50 * 1e3:.1f} ms, "
              f"p99 {p99 * 1e3:.1f} ms, max {seconds[-1] * 1e3:.1f} ms")
        assert p99 <= 0.100, f"scrape p99 {p99 * 1e3:.1f} ms with {IDLE_CONNECTIONS} idle"

        # And on a kept-alive connection, as a scraper's next scrapes.
        conn = http.client.HTTPConnection(host, int(port), timeout=5)
        try:
            for _ in range(3):
                conn.request("GET", "/metrics")
                response = conn.getresponse()
                assert response.status == 200 and response.read()
            conn.request("GET", "/nothing")
            response = conn.getresponse()
            assert response.status == 404
            response.read()
        finally:
            conn.close()
    finally:
        for s in idle:
            s.close()
        assert d.stop() == 0, d.log_tail()
        d.kill()
        shutil.rmtree(workdir, ignore_errors=True)
