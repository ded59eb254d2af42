"""The daemon process: clean SIGTERM exit, and one daemon per socket."""
from __future__ import annotations

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
