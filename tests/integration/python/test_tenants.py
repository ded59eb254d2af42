"""Tenant isolation (issue 15, docs/security.md): a daemon with [[tenants]] admits each Unix
connection by its peer credentials and each TCP caller by its token, and keeps every tenant
out of the others' sessions, namespaces, blocks, events and admin operations.

Clients of other tenants run with other primary gids (tenants matched by gids), so this needs
root (it sets the gid of child processes; their uid stays 0, which no tenant lists, since the
Python under test may live where other uids cannot read it); without root it skips with
that reason. Matching by uid is TenantTable's unit test.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

import kvstrata
from host_child import block_bytes
from prom_text import scrape
from kvs_testing import Daemon, assert_code, mha_spec, run_daemon, short_tmpdir

CHILD = Path(__file__).resolve().parent / "tenant_child.py"
GID_A, GID_B, GID_NOBODY, GID_C = 41001, 41002, 41003, 41004
BLOCK = 32 << 10  # mha_spec's block
A_SHARE = 8 << 20
SPEC = mha_spec(salt="tenant-test")


@pytest.fixture(scope="module")
def tenant_daemon():
    if os.geteuid() != 0:  # like the GPU tests without a GPU: say why, never pass silently
        pytest.skip("test_tenants.py runs clients with other gids (setgid): it needs root")
    workdir = short_tmpdir()
    with socket.socket() as probe:  # a free port for the TCP listener
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    token = workdir / "ops.token"
    token.write_text("ops-secret-token\n")
    config = workdir / "tenants.toml"
    config.write_text(f"""
[server]
socket_mode = "0666"
tcp_address = "127.0.0.1:{port}"
[[tenants]]
name = "team-a"
gids = [{GID_A}]
l1_capacity = "8MiB"
[[tenants]]
name = "team-b"
gids = [{GID_B}]
[[tenants]]
name = "team-c"
gids = [{GID_C}]
shared_memory = true
[[tenants]]
name = "ops"
gids = [0]
token_file = "{token}"
admin = true
""")
    daemon = Daemon(workdir, {"l2.enabled": "false", "l1.capacity": "64MiB",
                              "l1.slab_size": "1MiB"})
    daemon.args.append(f"--config={config}")
    yield from run_daemon(daemon)


def as_gid(gid: int):
    def become() -> None:
        os.setgroups([])
        os.setgid(gid)
    return become


def child(daemon: Daemon, gid: int, **args) -> subprocess.Popen:
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.Popen(
        [sys.executable, str(CHILD), json.dumps({"endpoint": daemon.endpoint, "spec": SPEC,
                                                  **args})],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=as_gid(gid), cwd="/", env=env)


def result(proc: subprocess.Popen) -> dict:
    line = proc.stdout.readline()
    assert line, f"tenant child failed:\n{proc.stderr.read()}"
    return json.loads(line)


def test_tenants_never_reach_each_other(tenant_daemon: Daemon) -> None:
    a = child(tenant_daemon, GID_A, chain="a", count=8, hold=True, lease=True)
    try:
        ra = result(a)
        assert ra["store"]["stored"] == 8 and ra["hits"] == 8, ra
        assert ra["lease_id"]
        b = child(tenant_daemon, GID_B, chain="a", count=8,
                  foreign_session=ra["session_id"], foreign_namespace=ra["namespace_id"],
                  foreign_lease=ra["lease_id"])
        rb = result(b)
        assert b.wait(timeout=30) == 0, b.stderr.read()
        # The same spec (salt included) is another namespace for another tenant: none of
        # A's blocks are visible to B.
        assert rb["fingerprint"] != ra["fingerprint"]
        assert rb["hits"] == 0
        # B may not map the shared region (shared_memory = false): its host-mode store fails.
        assert rb["store_error"] == "NOT_FOUND"
        # A's session id is unknown to B on every path.
        for key in ("foreign_lookup", "foreign_fast_lookup", "foreign_heartbeat", "foreign_close",
                    "foreign_acquire"):
            assert rb[key] == "NOT_FOUND", (key, rb)
        # A's lease: a load of B's naming it is refused and does not take it over (a lease
        # passes only between sessions of one tenant), and B's release frame skips it.
        assert rb["foreign_lease_load"] == "FAILED_PRECONDITION", rb
        assert rb["foreign_lease_released"] == 0
        assert rb["listed_sessions"] == [rb["session_id"]]
        assert rb["listed_namespaces"] == [rb["fingerprint"]]
        assert rb["listed_salts"] == ["<redacted>"]
        assert rb["all_events"] == "PERMISSION_DENIED"
        assert rb["clear"] == "PERMISSION_DENIED" and rb["get_config"] == "PERMISSION_DENIED"
        assert rb["status"] == "OK"
        # B's attempts neither ended A's session nor touched its blocks.
        a.stdin.write("go\n")
        a.stdin.flush()
        after = result(a)
        assert after["hits_after"] == 8 and after["lease_released"] == 1, after
        assert a.wait(timeout=30) == 0, a.stderr.read()
    finally:
        a.kill()


def test_the_admin_sees_every_tenant(tenant_daemon: Daemon) -> None:
    a = child(tenant_daemon, GID_A, chain="admin-view", count=2, hold=True)
    try:
        ra = result(a)
        with tenant_daemon.client(timeout=10.0) as ops:  # gid 0: the "ops" admin tenant
            assert ra["session_id"] in [s.session_id for s in ops.list_sessions().sessions]
            listed = {n.fingerprint: n for n in ops.list_namespaces().namespaces}
            assert listed[ra["fingerprint"]].spec.salt == "<redacted>"
            assert ops.get_config().toml
            metrics = scrape(ops.get_status().metrics_address)
            assert metrics.value("kvstrata_tenant_l1_capacity_bytes", tenant="team-a") == A_SHARE
            assert metrics.value("kvstrata_tenant_l1_used_bytes", tenant="team-a") >= 2 * BLOCK
        a.stdin.write("go\n")
        a.stdin.flush()
        assert result(a)["hits_after"] == 2
    finally:
        a.kill()
        a.wait(timeout=30)


def test_a_peer_no_tenant_claims_is_refused(tenant_daemon: Daemon) -> None:
    probe = (
        "import socket,sys,kvstrata\n"
        "c = kvstrata.Client(sys.argv[1], timeout=3.0)\n"
        "try:\n"
        "    c.get_status(); print('grpc:OK')\n"
        "except kvstrata.KVStrataError as e:\n"
        "    print('grpc:' + e.code.name)\n"
        "s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1] + '.lookup')\n"
        "s.settimeout(3.0); print('lookup:' + str(len(s.recv(64)) > 0))\n")
    out = subprocess.run([sys.executable, "-c", probe, tenant_daemon.endpoint], text=True,
                         capture_output=True, preexec_fn=as_gid(GID_NOBODY), cwd="/", timeout=60)
    assert "grpc:UNAVAILABLE" in out.stdout, out
    assert "lookup:True" in out.stdout, out  # a PERMISSION_DENIED frame, then closed
    assert "connection_refused socket=grpc" in Path(tenant_daemon.log_path).read_text()
    assert "lookup_socket_refused" in Path(tenant_daemon.log_path).read_text()


def test_tcp_callers_are_their_tokens_tenant(tenant_daemon: Daemon) -> None:
    with tenant_daemon.client(timeout=10.0) as ops:
        status = ops.get_status()
    target = next(l.address for l in status.listeners if l.kind == "tcp")
    for token, want in (("ops-secret-token", None), ("wrong", grpc.StatusCode.UNAUTHENTICATED),
                        (None, grpc.StatusCode.UNAUTHENTICATED)):
        with kvstrata.Client(f"tcp://{target}", token=token, timeout=10.0) as c:
            if want is None:
                assert c.get_config().toml  # the admin token: admin operations work
            else:
                with pytest.raises(kvstrata.KVStrataError) as err:
                    c.get_status()
                assert_code(err, want)


def test_a_tenant_with_an_l1_share_maps_only_its_own_partition(tenant_daemon: Daemon) -> None:
    """team-a has an 8 MiB L1 partition of its own: its host-mode clients map that partition
    only, and it is team-a's quota; team-c (shared_memory) maps partition 0, where team-a's
    bytes never are."""
    a = child(tenant_daemon, GID_A, chain="share-a", count=16, hold=True)
    try:
        ra = result(a)
        assert ra["region_bytes"] == A_SHARE, ra
        assert ra["store"]["stored"] == 16 and ra["loaded_exact"] == 16, ra
        c = child(tenant_daemon, GID_C, chain="share-c", count=16, hold=True)
        try:
            rc = result(c)
            assert rc["region_bytes"] == (64 << 20) - A_SHARE, rc
            assert rc["store"]["stored"] == 16 and rc["loaded_exact"] == 16, rc
            # A fills far past its share: only A's own blocks are evicted.
            flood = child(tenant_daemon, GID_A, chain="share-flood", count=600)
            rf = result(flood)
            assert flood.wait(timeout=60) == 0, flood.stderr.read()
            assert rf["region_bytes"] == A_SHARE
            assert rf["store"]["stored"] + rf["store"].get("dropped", 0) <= 600
            c.stdin.write("go\n")
            c.stdin.flush()
            assert result(c)["hits_after"] == 16  # C's partition 0 was untouched by A's flood
        finally:
            c.kill()
            c.wait(timeout=30)
        a.stdin.write("go\n")
        a.stdin.flush()
        assert result(a)["hits_after"] < 16  # A's own blocks made room for its flood
    finally:
        a.kill()
        a.wait(timeout=30)


def test_partition_zero_never_holds_a_partitioned_tenants_bytes(tenant_daemon: Daemon) -> None:
    """Bytes team-a stores (its own partition) do not appear anywhere in partition 0."""
    a = child(tenant_daemon, GID_A, chain="needle-a", count=4, seed=99)  # nobody else's seed
    ra = result(a)
    assert a.wait(timeout=30) == 0, a.stderr.read()
    assert ra["loaded_exact"] == 4
    needle = block_bytes(99, 2, BLOCK).tobytes()[:256].hex()
    c = child(tenant_daemon, GID_C, chain="needle-c", count=1, needle=needle, seed=7)
    rc = result(c)
    assert c.wait(timeout=30) == 0, c.stderr.read()
    assert rc["region_bytes"] == (64 << 20) - A_SHARE
    assert rc["needle_found"] is False
