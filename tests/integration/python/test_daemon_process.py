"""The daemon process: clean SIGTERM exit, and one daemon per socket."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

import kvstrata
from kvs_testing import Daemon, assert_serving, daemon_binary, short_tmpdir


def test_sigterm_exits_zero_with_open_session(daemon_factory) -> None:
    d = daemon_factory()
    with d.client() as c:
        s = kvstrata.Session(c, client_name="left-open")
        s.register_namespace(engine="other", model="m", dtype="float16", num_layers=1,
                             num_kv_heads=1, head_size=8, tokens_per_block=4, kv_layout="vllm_nhd")
        assert d.stop() == 0, d.log_tail()
        s.close()


def test_second_daemon_on_same_socket_refuses(daemon, client: kvstrata.Client, tmp_path) -> None:
    second = Daemon(tmp_path, socket=daemon.socket)
    proc = second.spawn()
    try:
        rc = proc.wait(timeout=20)
    finally:
        second.kill()
    assert rc != 0, "a second daemon must not take over a live daemon's socket"
    assert_serving(client)
    assert client.get_status().pid == daemon.proc.pid


def _start_fails(tmp_path, settings) -> str:
    """The daemon exits non-zero at start; its output."""
    d = Daemon(short_tmpdir(), settings)
    proc = d.spawn()
    try:
        rc = proc.wait(timeout=30)
    finally:
        d.kill()
    assert rc != 0
    return d.log_path.read_text(errors="replace")


def test_l1_larger_than_the_memory_it_may_use_is_refused_at_start(tmp_path) -> None:
    # Populating it would get the daemon OOM-killed with no message.
    out = _start_fails(tmp_path, {"l1.capacity": "64TiB", "l2.enabled": "false"})
    assert "l1.capacity" in out and "more than this daemon may use" in out, out[-2000:]


def test_huge_pages_on_without_huge_pages_names_the_key(tmp_path) -> None:
    meminfo = Path("/proc/meminfo").read_text()
    free = int(next(l.split()[1] for l in meminfo.splitlines() if l.startswith("HugePages_Free")))
    if free * 2 >= 64:
        pytest.skip(f"{free} huge pages are free here: the region would fit")
    out = _start_fails(tmp_path, {"l1.capacity": "64MiB", "l1.slab_size": "2MiB",
                                  "l1.huge_pages": "on", "l2.enabled": "false"})
    assert "l1.huge_pages" in out and "vm.nr_hugepages" in out, out[-2000:]


def test_a_directory_is_not_a_config_file(tmp_path) -> None:
    proc = subprocess.run([str(daemon_binary()), f"--config={tmp_path}", "--check_config"],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode != 0
    assert "is a directory" in proc.stdout + proc.stderr



def test_start_up_log_names_sizes_in_words_and_every_endpoint(daemon_factory) -> None:
    tmp = short_tmpdir()
    try:
        d = daemon_factory({"l2.enabled": "true", "l2.path": f"{tmp}/l2", "l2.capacity": "1536MiB",
                            "events.enabled": "true", "events.endpoint": f"ipc://{tmp}/ev.pub",
                            "events.replay_endpoint": f"ipc://{tmp}/ev.replay"})
        with d.client() as c:
            metrics = c.get_status().metrics_address
        log = d.log_path.read_text(errors="replace")
        assert 'l1_populating size="64.0 MiB"' in log, log  # said before the pool fills
        assert 'l1_ready size="64.0 MiB"' in log, log
        assert 'tier_ready tier=l2' in log and 'capacity="1.5 GiB"' in log, log
        listening = [line for line in log.splitlines() if " listening kind=" in line]
        for expected in (f"kind=grpc-unix address={d.socket} ",
                         f"kind=lookup address={d.socket}.lookup ",
                         f"kind=shm address={d.socket}.shm ",
                         f"kind=metrics address=http://{metrics}/metrics",
                         f"kind=events address=ipc://{tmp}/ev.pub",
                         f"kind=events-replay address=ipc://{tmp}/ev.replay"):
            assert any(expected in line for line in listening), (expected, listening)
        ready = log.index(" ready instance=")
        assert all(log.index(line) < ready for line in listening), log
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
