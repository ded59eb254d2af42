"""Fixtures for the SGLang connector tests: a real kvstratad (tests/integration/python's
kvs_testing launcher) and SGLang's real host KV pools, in the .venv-sglang environment
(scripts/setup_sglang.sh): SGLang 0.5.23, or another release of scripts/sglang_versions.txt
with its .sglang-matrix directories on PYTHONPATH. KVSTRATA_SGLANG_VERSION (set by
scripts/test.sh) names the SGLang the run is meant for; another one found stops the run."""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "python"))  # kvs_testing: the one daemon launcher

from kvs_testing import daemons, Daemon, run_daemon, short_tmpdir  # noqa: E402

import kvstrata_sglang  # noqa: E402
import sglang_pools  # noqa: E402


def pytest_sessionstart(session) -> None:
    import sglang

    want = os.environ.get("KVSTRATA_SGLANG_VERSION")
    if want and want != sglang.__version__:
        pytest.exit(f"KVSTRATA_SGLANG_VERSION is {want}, but sglang {sglang.__version__} was "
                    f"imported from {sglang.__file__}", returncode=4)


def pytest_report_header(config) -> str:
    import sglang
    import torch

    return (f"sglang {sglang.__version__} ({Path(sglang.__file__).parent}), "
            f"torch {torch.__version__}, host pools from "
            f"{'buffer infos' if sglang_pools.HOST_POOLS_TAKE_BUFFER_INFO else 'device pools'}")


@pytest.fixture(scope="session")
def daemon() -> Iterator[Daemon]:
    """The shared kvstratad of the run (64 MiB L1); must exit 0 on SIGTERM at the end."""
    yield from run_daemon(Daemon(short_tmpdir()))


@pytest.fixture
def daemon_factory() -> Iterator[Callable[..., Daemon]]:
    """Extra daemons for one test (own socket); each is stopped and removed afterwards."""
    yield from daemons()


@pytest.fixture
def backends() -> Iterator[Callable[..., kvstrata_sglang.KVStrataStorage]]:
    """make(config, pool) -> a registered KVStrataStorage; all are closed after the test."""
    made: List[kvstrata_sglang.KVStrataStorage] = []

    def make(config, pool=None) -> kvstrata_sglang.KVStrataStorage:
        b = kvstrata_sglang.KVStrataStorage(config, {})
        made.append(b)
        if pool is not None:
            b.register_mem_pool_host(pool)
        return b

    yield make
    for b in made:
        b.close()


@pytest.fixture
def salt(request) -> str:
    """A salt unique to the test, so tests sharing the daemon never see each other's pages."""
    return request.node.nodeid


@pytest.fixture
def pools():
    return sglang_pools
