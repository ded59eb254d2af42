"""Fixtures of the GPU tests: kvstratad subprocesses on temporary sockets.

The daemon is $KVSTRATA_DAEMON, else <repo>/.bundle/bin/kvstratad, else
<repo>/build/daemon/server/kvstratad; it runs with l1.capacity=8GiB, l1.slab_size=64MiB,
l2.enabled=false and no metrics endpoint. Tests that need it fail (not skip) when it is
missing or was built without CUDA. The engine side always runs in another process than the
daemon (the test process, or spawned engine processes).

torch is not imported here: GPU test modules call gpu_support.require_gpu() first.
"""
from __future__ import annotations

import itertools
import os
import sys
from pathlib import Path
from typing import Iterator

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_support import Daemon, managed_daemon  # noqa: E402

_salts = itertools.count()


@pytest.fixture(scope="session")
def gpu_daemon() -> Iterator[Daemon]:
    """The shared kvstratad of the run (8 GiB L1); must exit 0 on SIGTERM at the end."""
    yield from managed_daemon()


@pytest.fixture
def client(gpu_daemon: Daemon):
    import kvstrata

    with kvstrata.Client(gpu_daemon.endpoint, timeout=30.0) as c:
        status = c.get_status()
        if not status.cuda_enabled:
            pytest.fail("kvstratad reports cuda_enabled=false: it was built without CUDA or "
                        f"sees no GPU\n{gpu_daemon.log_tail()}", pytrace=False)
        yield c
        assert gpu_daemon.running(), f"kvstratad died:\n{gpu_daemon.log_tail()}"
        assert c.is_serving(), "kvstratad stopped answering the health check"


@pytest.fixture
def session(client):
    import kvstrata

    with kvstrata.Session(client, client_name="pytest-gpu") as s:
        yield s


@pytest.fixture
def salt() -> str:
    """A namespace salt unique to the test (tests never see each other's blocks)."""
    return f"gpu-{os.getpid()}-{next(_salts)}"
