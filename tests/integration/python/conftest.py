"""Fixtures that run a real kvstratad on a temporary Unix socket.

The daemon binary is $KVSTRATA_DAEMON, default <repo>/build/daemon/server/kvstratad (build it
with `cmake -S . -B build -G Ninja && cmake --build build --target kvstratad`). Tests that
need it fail (not skip) when it is missing, so a broken build never reads as green.
"""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional

import pytest

import kvstrata
from kvs_testing import daemons, Daemon, run_daemon, short_tmpdir


@pytest.fixture
def daemon_factory() -> Iterator[Callable[..., Daemon]]:
    """Start extra daemons in a test; each is SIGTERMed (and killed if stuck) afterwards."""
    yield from daemons()


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    """A short temporary directory for sockets, removed after the test."""
    path = short_tmpdir()
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def daemon() -> Iterator[Daemon]:
    """The shared kvstratad of the test run; must exit 0 on SIGTERM at the end."""
    yield from run_daemon(Daemon(short_tmpdir()))


@pytest.fixture
def client(daemon: Daemon) -> Iterator[kvstrata.Client]:
    """A Client on the shared daemon; after the test the daemon must still be serving."""
    with kvstrata.Client(daemon.endpoint, timeout=10.0) as c:
        yield c
        assert daemon.running(), f"kvstratad died:\n{daemon.log_tail()}"
        assert c.is_serving(), "kvstratad stopped answering the health check"


@pytest.fixture
def session(client: kvstrata.Client) -> Iterator[kvstrata.Session]:
    """An open Session (heart-beating) on the shared daemon."""
    with kvstrata.Session(client, client_name="pytest") as s:
        yield s
