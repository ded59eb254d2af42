"""The daemon process: clean SIGTERM exit, and one daemon per socket."""
from __future__ import annotations

import kvstrata
from kvs_testing import Daemon, assert_serving


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
