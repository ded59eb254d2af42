"""Fixtures that run a real kvstratad on a temporary Unix socket.

The daemon binary is $KVSTRATA_DAEMON, default <repo>/build/daemon/server/kvstratad (build it
with `cmake -S . -B build -G Ninja && cmake --build build --target kvstratad`). Tests that
need it fail (not skip) when it is missing, so a broken build never reads as green.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional

import pytest

import kvstrata
from host_helpers import HOST_SETTINGS, SMALL_SETTINGS
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


# ---------------------------------------------------------------------- host mode
# Two daemons per test module (test_host_mode*.py): host_daemon (64 MiB L1, 4 MiB slabs) for
# most tests and small_daemon (8 MiB L1, 1 MiB slabs) for eviction pressure.


def _module_daemon(settings: Dict[str, str]) -> Iterator[Daemon]:
    yield from run_daemon(Daemon(short_tmpdir(), settings))


@pytest.fixture(scope="module")
def host_daemon():
    yield from _module_daemon(HOST_SETTINGS)


@pytest.fixture(scope="module")
def small_daemon():
    yield from _module_daemon(SMALL_SETTINGS)


@pytest.fixture
def hclient(host_daemon: Daemon):
    with host_daemon.client(timeout=10.0) as c:
        yield c
        assert host_daemon.running(), f"kvstratad died:\n{host_daemon.log_tail()}"
        assert c.is_serving()


@pytest.fixture
def hsession(hclient: kvstrata.Client):
    with kvstrata.Session(hclient, client_name="pytest-host") as s:
        yield s


@pytest.fixture
def sclient(small_daemon: Daemon):
    with small_daemon.client(timeout=10.0) as c:
        yield c
        assert small_daemon.running(), f"kvstratad died:\n{small_daemon.log_tail()}"


@pytest.fixture
def ssession(sclient: kvstrata.Client):
    with kvstrata.Session(sclient, client_name="pytest-small") as s:
        yield s


# ---------------------------------------------------------------------- tiers (test_tier*.py)


@pytest.fixture
def cli():
    """Runs the real `kvstrata` CLI against a daemon: cli(daemon, *args)."""
    binary = os.environ.get("KVSTRATA_CLI") or str(
        Path(__file__).resolve().parents[3] / "build" / "client" / "cli" / "kvstrata")

    def run(daemon: Daemon, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([binary, f"--endpoint={daemon.endpoint}", *args],
                              capture_output=True, text=True, timeout=60)
    return run


@pytest.fixture
def workdir() -> Iterator[Path]:
    d = short_tmpdir()
    yield d
    shutil.rmtree(d, ignore_errors=True)
