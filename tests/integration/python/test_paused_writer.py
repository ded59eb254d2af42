"""A host-mode writer paused (SIGSTOP) past its heartbeat deadline, between reserve and copy,
must never overwrite blocks that another session committed meanwhile: its slots stay fenced
until its process exits (docs/shared-memory.md, "Fencing")."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import kvstrata
from host_child import block_bytes, chain_keys
from kvs_testing import Daemon, mha_spec, run_daemon, short_tmpdir, wait_until
from prom_text import scrape

CHILD = Path(__file__).resolve().parent / "host_child.py"
HEARTBEAT_MS = 1000
PAUSED_BLOCKS = 16
POOL_BLOCKS = 128  # 4 MiB of 32 KiB blocks


@pytest.fixture(scope="module")
def small_daemon():
    yield from run_daemon(Daemon(short_tmpdir(), {
        "sessions.heartbeat_timeout_ms": str(HEARTBEAT_MS), "l1.capacity": "4MiB",
        "l1.slab_size": "1MiB", "l2.enabled": "false"}))


def fenced_bytes(client: kvstrata.Client) -> float:
    return scrape(client.get_status().metrics_address).value("kvstrata_fenced_bytes")


def stopped(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2] in "Tt"


def test_paused_writer_cannot_corrupt_blocks_committed_after_its_session_ended(
        small_daemon: Daemon) -> None:
    spec = mha_spec(salt="paused-writer")
    args = {"endpoint": small_daemon.endpoint, "spec": spec, "chain": "paused",
            "count": PAUSED_BLOCKS, "heartbeat_timeout_ms": HEARTBEAT_MS}
    child = subprocess.Popen([sys.executable, str(CHILD), "pause-mid-store", json.dumps(args)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             cwd=str(CHILD.parent))
    try:
        first = json.loads(child.stdout.readline())
        assert len(first["offsets"]) == PAUSED_BLOCKS
        assert wait_until(lambda: stopped(child.pid), timeout_s=10)
        with small_daemon.client(timeout=10.0) as client:
            live = lambda: {s.session_id for s in client.list_sessions().sessions}  # noqa: E731
            assert wait_until(lambda: first["session_id"] not in live(), timeout_s=10)
            assert fenced_bytes(client) == PAUSED_BLOCKS * 32 * 1024

            with kvstrata.Session(client, client_name="victim") as victim:
                ns = victim.register_namespace(**spec)
                keys = chain_keys("victim", POOL_BLOCKS)
                blocks = [block_bytes(1, i, ns.bytes_per_block) for i in range(POOL_BLOCKS)]
                stored = victim.store(ns, keys, blocks)  # Fills every slot the pool can give.
                assert stored.stored > 0

                child.send_signal(signal.SIGCONT)  # The writer finishes its copies...
                second = json.loads(child.stdout.readline())
                assert second["commit_error"] == "NOT_FOUND"  # ...and learns its session is gone.

                got = victim.load(ns, keys)
                assert got.hit_blocks > 0
                wrong = [i for i, found in enumerate(got)
                         if found and not np.array_equal(got.blocks[i], blocks[i])]
                assert wrong == [], f"{len(wrong)} of {got.hit_blocks} loaded blocks changed"

            child.stdin.write("\n")  # Let the writer exit: its slots go back to the pool.
            child.stdin.flush()
            assert child.wait(timeout=30) == 0
            assert wait_until(lambda: fenced_bytes(client) == 0, timeout_s=10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_paused_reader_pinned_blocks_show_in_fenced_bytes(small_daemon: Daemon) -> None:
    """Issue 46: a session that ended while its process was paused inside a load kept its
    blocks pinned, but kvstrata_fenced_bytes did not count them: invisible to an operator."""
    spec = mha_spec(salt="paused-reader")
    keys = chain_keys("reader", PAUSED_BLOCKS)
    with small_daemon.client(timeout=10.0) as client:
        with kvstrata.Session(client, client_name="reader-source") as source:
            ns = source.register_namespace(**spec)
            blocks = [block_bytes(2, i, ns.bytes_per_block) for i in range(PAUSED_BLOCKS)]
            assert source.store(ns, keys, blocks).stored == PAUSED_BLOCKS
        before = fenced_bytes(client)
        args = {"endpoint": small_daemon.endpoint, "spec": spec, "chain": "reader",
                "count": PAUSED_BLOCKS, "heartbeat_timeout_ms": HEARTBEAT_MS}
        child = subprocess.Popen([sys.executable, str(CHILD), "pause-holding-load",
                                  json.dumps(args)], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True, cwd=str(CHILD.parent))
        try:
            first = json.loads(child.stdout.readline())
            assert first["ready"] == PAUSED_BLOCKS
            assert wait_until(lambda: stopped(child.pid), timeout_s=10)
            live = lambda: {s.session_id for s in client.list_sessions().sessions}  # noqa: E731
            assert wait_until(lambda: first["session_id"] not in live(), timeout_s=10)
            assert fenced_bytes(client) - before == PAUSED_BLOCKS * 32 * 1024

            child.send_signal(signal.SIGCONT)
            child.stdin.write("\n")  # The reader exits: its pins end.
            child.stdin.flush()
            assert child.wait(timeout=30) == 0
            assert wait_until(lambda: fenced_bytes(client) == before, timeout_s=10)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
