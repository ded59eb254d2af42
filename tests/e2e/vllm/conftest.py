"""Fixtures for the vLLM connector tests: a real kvstratad (kvs_testing.Daemon), a tiny
local model, and vLLM's real Scheduler driven through harness.Engine.

Run in the vLLM venv (bash scripts/setup_vllm.sh):
    KVSTRATA_DAEMON=build/daemon/server/kvstratad .venv-vllm/bin/python -m pytest tests/e2e/vllm
"""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Callable, Iterator, List

import pytest

# Nothing is downloaded: the model is made locally (tiny_model.py).
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "integration" / "python"))

from kvs_testing import Daemon, run_daemon, short_tmpdir  # noqa: E402
from tiny_model import make_tiny_model  # noqa: E402


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(make_tiny_model(tmp_path_factory.mktemp("tiny-llama")))


@pytest.fixture
def daemon() -> Iterator[Daemon]:
    """A fresh kvstratad per test (its own socket and L2 directory)."""
    workdir = short_tmpdir()
    yield from run_daemon(Daemon(workdir, {"l2.enabled": "true",
                                          "l2.path": str(workdir / "l2")}))


@pytest.fixture
def engines() -> Iterator[Callable]:
    """engines(model_dir, extra, **kw) -> harness.Engine, shut down after the test."""
    from harness import Engine

    made: List[Engine] = []

    def make(model: str, extra: dict, **kwargs) -> Engine:
        made.append(Engine(model, extra, **kwargs))
        return made[-1]

    yield make
    for e in made:
        e.shutdown()


@pytest.fixture
def workdir() -> Iterator[Path]:
    path = short_tmpdir()
    yield path
    shutil.rmtree(path, ignore_errors=True)
