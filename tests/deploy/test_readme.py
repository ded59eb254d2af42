"""README.md's command blocks, run as a new user would run them (issue 18): every fenced
`sh` / `python` block is either run here or listed below with the reason it cannot run
without a GPU. A new block that is in neither list fails the test.

Runs, against one daemon started by the README's own `bash scripts/run.sh` (the embedded
default configuration; its socket, L2 directory and runtime files redirected into a
temporary directory through the environment variables the defaults read):
the `kvstrata status` block, the Python client set-up and the Python store/lookup/load
example.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"

# First line of a block -> why it does not run here.
NOT_HERE = {
    "bash scripts/run.sh     # build and run kvstratad": "run below (starts the daemon)",
    "bash scripts/test.sh": "this test is part of it",
    "reg = s.register_cuda_kv_caches(": "needs CUDA KV caches (a GPU)",
    "pip install ./client/python ./connector_vllm": "vllm serve needs a GPU and a model",
    "pip install ./client/python ./connector_sglang": "an SGLang server needs a GPU and a model",
    "bash scripts/build_wheels.sh": "tests/deploy/test_wheels.py runs it (into a temporary dist/)",
}
RUN_HERE = {
    "build/client/cli/kvstrata status ",
    "bash scripts/setup_python.sh && . .venv/bin/activate",
    "import numpy as np, kvstrata",
}


def blocks() -> List[Tuple[str, str]]:
    """(language, body) of every fenced sh/python block."""
    return [(m.group(1), m.group(2)) for m in
            re.finditer(r"^```(sh|python)\n(.*?)^```", README.read_text(), re.M | re.S)]


def first_line(body: str) -> str:
    return body.strip().splitlines()[0]


def test_every_block_is_run_or_has_a_reason():
    for _, body in blocks():
        line = first_line(body)
        known = [k for k in list(NOT_HERE) + list(RUN_HERE) if line.startswith(k)]
        assert known, f"README block not covered by tests/deploy/test_readme.py: {line!r}"


def block(start: str) -> str:
    found = [body for _, body in blocks() if first_line(body).startswith(start)]
    assert len(found) == 1, (start, found)
    return found[0]


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    """`bash scripts/run.sh` as the README says, stopped with Ctrl-C (SIGINT) afterwards."""
    tmp = tmp_path_factory.mktemp("readme")
    env = dict(os.environ, KVSTRATA_SOCKET=str(tmp / "kvstrata.sock"),
               XDG_CACHE_HOME=str(tmp / "cache"), XDG_RUNTIME_DIR=str(tmp / "run"))
    env.pop("RUNTIME_DIRECTORY", None)
    log = (tmp / "run.log").open("w")
    line = first_line(block("bash scripts/run.sh"))
    proc = subprocess.Popen(["bash", "-c", line.split("#")[0]], cwd=REPO, env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 600  # a fresh machine builds the daemon first
    cli = REPO / "build/client/cli/kvstrata"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"scripts/run.sh exited {proc.returncode}:\n"
                        f"{(tmp / 'run.log').read_text()[-3000:]}")
        if Path(env["KVSTRATA_SOCKET"]).exists() and cli.exists() and subprocess.run(
                [str(cli), "status"], env=env, capture_output=True).returncode == 0:
            break
        time.sleep(1)
    else:
        proc.kill()
        pytest.fail("the daemon started by scripts/run.sh never answered `kvstrata status`")
    yield env
    os.killpg(proc.pid, signal.SIGINT)
    try:
        assert proc.wait(timeout=60) == 0, (tmp / "run.log").read_text()[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


def run_sh(body: str, env: Dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-euo", "pipefail", "-c", body], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)


def test_status_block(daemon):
    r = run_sh(block("build/client/cli/kvstrata status "), daemon)
    assert r.returncode == 0, r.stderr
    assert "kvstratad" in r.stdout and '"version"' in r.stdout, r.stdout


def test_python_block(daemon):
    setup = block("bash scripts/setup_python.sh")
    r = run_sh(setup + "\npython -c 'import kvstrata; print(kvstrata.__file__)'", daemon)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    example = block("import numpy as np, kvstrata") + (
        "\nassert hit.hit_blocks == 4, hit\nassert list(found) == [True] * 4, found\n"
        "assert [bytes(b[:1]) for b in found.blocks] == [bytes([i]) for i in range(4)]\n"
        "print('example ok')\n")
    python = REPO / ".venv/bin/python"
    r = subprocess.run([str(python if python.exists() else sys.executable), "-c", example],
                       cwd=REPO, env=daemon, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "example ok" in r.stdout, r.stdout + r.stderr


def test_compatibility_table_is_made_from_what_ci_runs():
    """README's compatibility table is scripts/compat_matrix.py's output from
    scripts/vllm_versions.txt and scripts/sglang_versions.txt, the lists scripts/test.sh and
    the setup scripts read; the pinned and the overlay versions there are the ones the setup
    installs."""
    r = subprocess.run([sys.executable, str(REPO / "scripts/compat_matrix.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    lines = [ln.split() for ln in (REPO / "scripts/vllm_versions.txt").read_text().splitlines()
             if ln.strip() and not ln.startswith("#")]
    where = {v[0]: v[2] for v in lines}
    setup = (REPO / "scripts/setup_vllm.sh").read_text()
    assert [v for v, w in where.items() if w == "venv"] == ["0.33.0"]
    assert 'vllm 0.33.0 \\' in setup
    assert [v for v, w in where.items() if w == "wheel"] == ["0.26.0"]
    assert '.vllm026}" 0.26.0' in setup
    assert "vllm_versions.txt" in (REPO / "scripts/test.sh").read_text()
    sglang = [ln.split() for ln in (REPO / "scripts/sglang_versions.txt").read_text().splitlines()
              if ln.strip() and not ln.startswith("#")]
    assert [v[0] for v in sglang if v[1] == "venv"] == ["0.5.23"]
    assert 'sglang_version="0.5.23"' in (REPO / "scripts/setup_sglang.sh").read_text()
    assert {v[1] for v in sglang} <= {"venv", "wheel"}, sglang
    for deps in {v[2] for v in sglang} - {"-"}:
        assert (REPO / f"connector_sglang/requirements-sglang-overlay-{deps}.txt").is_file(), deps
    assert "scripts/test_sglang.sh" in (REPO / "scripts/test.sh").read_text()
    for script in ("test_sglang.sh", "setup_sglang_matrix.sh"):
        assert "sglang_versions.txt" in (REPO / "scripts" / script).read_text()
