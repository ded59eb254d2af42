"""The `kvstrata` CLI against a real daemon: every command in human form and with --json
(which must parse), `top` run non-interactively, usage errors (exit 1), daemon errors
(exit 3) and a daemon that is down (exit 2, one line). The C++ cli_test covers the
tables' contents in more detail."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Iterator, List, Tuple

import numpy as np
import pytest

import kvstrata
from kvs_testing import REPO, Daemon, mha_spec, short_tmpdir

BLOCK = 4096
DOWN = "/tmp/kvstrata-nonexistent-cli/kvstrata.sock"


def cli_binary() -> Path:
    path = Path(os.environ.get("KVSTRATA_CLI", REPO / "build" / "client" / "cli" / "kvstrata"))
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.fail(f"kvstrata CLI not found at {path}: build it or set KVSTRATA_CLI",
                    pytrace=False)
    return path


def run(endpoint: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([str(cli_binary()), f"--endpoint={endpoint}", *args],
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def cdaemon() -> Iterator[Tuple[Daemon, str, List[str]]]:
    """A daemon with a session holding a namespace and two stored blocks."""
    workdir = short_tmpdir()
    d = Daemon(workdir).start()
    client = d.client(timeout=10.0)
    session = kvstrata.Session(client, client_name="cli-py")
    try:
        ns = session.register_namespace(**mha_spec(kv_layout="opaque", dtype="uint8",
                                                   opaque_block_bytes=BLOCK, salt="cli"))
        keys = [b"\x0a\x01", b"\x0a\x02"]
        session.store(ns, keys, [np.zeros(BLOCK, np.uint8)] * 2)
        yield d, ns.fingerprint, [k.hex() for k in keys]
    finally:
        session.close()
        client.close()
        assert d.stop() == 0, d.log_tail()
        d.kill()
        shutil.rmtree(workdir, ignore_errors=True)


def commands(fp: str, keys: List[str]) -> List[Tuple[List[str], str]]:
    """(arguments, text the human output must contain), in an order that keeps blocks."""
    return [
        (["status"], "uptime"),
        (["config"], "l1.capacity"),
        (["namespaces"], fp),
        (["sessions"], "cli-py"),
        (["tiers"], "l1"),
        (["stats"], "l1_blocks"),
        (["lookup", fp, *keys, "ffff"], "2 of 3 keys are leading hits"),
        (["pin", fp, keys[0]], "pinned 1 blocks"),
        (["unpin", fp, keys[0]], "unpinned 1 blocks"),
        (["evict", fp, "ffff"], "evicted 0 blocks"),
        (["top", "--iterations=1", "--interval=200ms"], "TIER"),
        (["version"], "kvstrata "),
    ]


def test_every_command_human_and_json(cdaemon) -> None:
    d, fp, keys = cdaemon
    for args, expect in commands(fp, keys):
        human = run(d.endpoint, *args)
        assert human.returncode == 0, (args, human.stdout, human.stderr)
        assert expect in human.stdout, (args, human.stdout)
        # Flags go before the command (absl flags); --json anywhere before it works.
        machine = run(d.endpoint, "--json", *args)
        assert machine.returncode == 0, (args, machine.stderr)
        for line in ([l for l in machine.stdout.splitlines() if l.strip()]
                     if args[0] == "top" else [machine.stdout]):
            json.loads(line)


def test_json_numbers_are_numbers(cdaemon) -> None:
    """Counters and sizes are JSON numbers (proto3's JSON mapping would quote 64-bit ones)."""
    d, fp, keys = cdaemon
    tiers = json.loads(run(d.endpoint, "--json", "tiers").stdout)["tiers"]
    l1 = next(t for t in tiers if t["name"] == "l1")
    assert l1["capacity_bytes"] == 64 << 20 and l1["blocks"] == 2, l1
    status = json.loads(run(d.endpoint, "--json", "status").stdout)
    assert isinstance(status["pid"], int) and isinstance(status["uptime_ms"], int), status
    assert status["tiers"][0]["tier"] == "TIER_L1_DRAM"  # enums keep their names
    counters = json.loads(run(d.endpoint, "--json", "stats").stdout)["counters"]
    assert all(isinstance(c["value"], int) for c in counters), counters
    evicted = json.loads(run(d.endpoint, "--json", "evict", fp, "ffff").stdout)
    assert evicted["evicted_blocks"] == 0 and evicted["pinned_blocks"] == 0, evicted
    namespaces = json.loads(run(d.endpoint, "--json", "namespaces").stdout)["namespaces"]
    assert namespaces[0]["fingerprint"] == fp and isinstance(namespaces[0]["blocks"], int)


def test_config_shows_the_paths_in_use(cdaemon) -> None:
    d, _, _ = cdaemon
    entries = json.loads(run(d.endpoint, "--json", "config").stdout)["entries"]
    values = {e["key"]: e["value"] for e in entries}
    assert values["l2.path"] == str(d.workdir / "cache" / "kvstrata" / "l2"), values["l2.path"]
    assert values["server.socket"] == str(d.socket)
    human = run(d.endpoint, "config").stdout
    assert str(d.workdir / "cache" / "kvstrata" / "l2") in human, human


def test_clear_human_and_json(cdaemon) -> None:
    d, fp, keys = cdaemon
    human = run(d.endpoint, "clear", fp)
    assert human.returncode == 0 and "100%" in human.stdout, human.stdout
    machine = run(d.endpoint, "--json", "clear", "all")
    assert machine.returncode == 0
    assert json.loads(machine.stdout)["done"] is True


def test_top_json_frames_and_rates(cdaemon) -> None:
    d, fp, keys = cdaemon
    with d.client(timeout=10.0) as c, kvstrata.Session(c, client_name="top") as s:
        ns = s.register_namespace(**mha_spec(kv_layout="opaque", dtype="uint8",
                                             opaque_block_bytes=BLOCK, salt="cli-top"))
        s.store(ns, [b"\x0b\x01"], [np.zeros(BLOCK, np.uint8)])
        proc = subprocess.Popen([str(cli_binary()), f"--endpoint={d.endpoint}", "--json",
                                 "--interval=1s", "--iterations=2", "top"],
                                stdout=subprocess.PIPE, text=True)
        time.sleep(0.5)  # top takes its first sample right after it starts
        for _ in range(50):
            s.lookup(ns, [b"\x0b\x01", b"\x0b\x02"])
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0
    frames = [json.loads(l) for l in out.splitlines()]
    assert len(frames) == 2
    assert all(f["source"] == "status+stats" for f in frames)
    lookups = sum(f["lookups_per_s"] * f["interval_s"] for f in frames)
    assert round(lookups) == 50
    assert 0.45 <= max(f["hit_rate"] or 0 for f in frames) <= 0.55   # 1 hit of 2 per lookup
    l1 = frames[-1]["tiers"][0]
    assert l1["tier"] == "l1" and l1["capacity_bytes"] == 64 << 20 and l1["blocks"] >= 1
    assert set(frames[-1]["throughput_bytes_per_s"]) == {
        "gpu_to_l1", "l1_to_gpu", "l1_to_l2", "l2_to_l1", "l1_to_l3", "l3_to_l1"}


@pytest.mark.parametrize("args", [
    ["frobnicate"], ["lookup", "abc", "zz"], ["top", "--iterations=-1"],
    ["top", "--interval=1ms", "--iterations=1"], ["top", "extra"], ["evict"],
])
def test_usage_errors_exit_1(cdaemon, args: List[str]) -> None:
    d, _, _ = cdaemon
    flags = [a for a in args if a.startswith("--")]
    rest = [a for a in args if not a.startswith("--")]
    proc = run(d.endpoint, *flags, *rest)
    assert proc.returncode == 1, (args, proc.stdout, proc.stderr)
    assert proc.stderr.strip()


def test_daemon_error_exits_3(cdaemon) -> None:
    d, _, _ = cdaemon
    proc = run(d.endpoint, "lookup", "0" * 32, "01")
    assert proc.returncode == 3
    assert "no namespace has fingerprint" in proc.stderr


@pytest.mark.parametrize("command", ["status", "config", "namespaces", "sessions", "tiers",
                                     "stats", "lookup", "evict", "pin", "unpin", "clear", "top"])
@pytest.mark.parametrize("json_flag", [False, True])
def test_daemon_down_exits_2_with_one_line(command: str, json_flag: bool) -> None:
    args = {"lookup": ["lookup", "0" * 32, "01"], "evict": ["evict", "0" * 32, "01"],
            "pin": ["pin", "0" * 32, "01"], "unpin": ["unpin", "0" * 32, "01"],
            "clear": ["clear", "all"], "top": ["--iterations=1", "top"]}.get(command, [command])
    proc = run(DOWN, *(["--json"] if json_flag else []), *args, timeout=30)
    assert proc.returncode == 2, (command, proc.stdout, proc.stderr)
    assert proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "cannot reach kvstratad" in proc.stderr
