"""scripts/build.sh and scripts/run.sh: what they ask CMake and Ninja to build (issue 18:
run.sh builds only what it runs). A fake cmake and ninja on PATH record their arguments."""
from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def fake_tools(tmp_path: Path) -> Path:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("cmake", "ninja"):
        f = bindir / tool
        f.write_text(f'#!/bin/sh\necho "$@" >> "{tmp_path}/{tool}.args"\n')
        f.chmod(f.stat().st_mode | stat.S_IEXEC)
    return bindir


def build(tmp_path: Path, targets: "str | None") -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=f"{fake_tools(tmp_path)}:{os.environ['PATH']}",
               KVSTRATA_BUILD_DIR=str(tmp_path / "build"))
    env.pop("KVSTRATA_BUILD_TARGETS", None)
    if targets is not None:
        env["KVSTRATA_BUILD_TARGETS"] = targets
    return subprocess.run(["bash", str(REPO / "scripts/build.sh")], env=env, check=True,
                          capture_output=True, text=True)


def test_build_builds_every_target_by_default(tmp_path):
    out = build(tmp_path, None)
    nproc = subprocess.check_output(["nproc"], text=True).strip()
    assert (tmp_path / "ninja.args").read_text().split() == \
        ["-C", str(tmp_path / "build"), "-j", nproc]
    assert "every target" in out.stdout


def test_build_builds_only_the_named_targets(tmp_path):
    out = build(tmp_path, "kvstratad kvstrata")
    assert (tmp_path / "ninja.args").read_text().split()[-2:] == ["kvstratad", "kvstrata"]
    assert "building kvstratad kvstrata" in out.stdout


def test_run_builds_only_the_daemon_and_the_cli():
    text = (REPO / "scripts/run.sh").read_text()
    assert 'KVSTRATA_BUILD_TARGETS="kvstratad kvstrata" bash "$repo/scripts/build.sh"' in text
