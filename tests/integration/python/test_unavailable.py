"""DaemonUnavailable when nothing (or a dead daemon) is at the endpoint."""
from __future__ import annotations

import socket
from pathlib import Path

import grpc
import pytest

import kvstrata


def free_tcp_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def assert_unavailable(endpoint: str) -> None:
    with kvstrata.Client(endpoint, timeout=5.0) as c:
        with pytest.raises(kvstrata.DaemonUnavailable) as exc:
            c.get_status()
    assert exc.value.code == grpc.StatusCode.UNAVAILABLE
    assert isinstance(exc.value, kvstrata.KVStrataError)


def test_missing_socket(sock_dir: Path) -> None:
    assert_unavailable(str(sock_dir / "kvstrata.sock"))


def test_stale_socket_file(sock_dir: Path) -> None:
    path = sock_dir / "kvstrata.sock"
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))  # Bound but never listening, like a crashed daemon's leftover.
    try:
        assert_unavailable(f"unix://{path}")
    finally:
        stale.close()


def test_closed_tcp_port() -> None:
    assert_unavailable(f"127.0.0.1:{free_tcp_port()}")


def test_session_to_nowhere_raises(sock_dir: Path) -> None:
    with pytest.raises(kvstrata.DaemonUnavailable):
        kvstrata.Session(endpoint=str(sock_dir / "kvstrata.sock"), timeout=5.0)


def test_stopped_daemon(daemon_factory) -> None:
    d = daemon_factory()
    with d.client(timeout=5.0) as c:
        assert c.is_serving()
        assert d.stop() == 0, d.log_tail()
        with pytest.raises(kvstrata.DaemonUnavailable):
            c.get_status()
