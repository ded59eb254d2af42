"""deploy/systemd: the unit passes `systemd-analyze verify` (no warning at all), its
sandboxing scores as "OK" in `systemd-analyze security`, its hardening directives are
there, and its config file is accepted by kvstratad --check_config."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from conftest import REPO
from kvs_testing import daemon_binary

UNIT = REPO / "deploy" / "systemd" / "kvstratad.service"
CONFIG = REPO / "deploy" / "systemd" / "kvstrata.toml"
SYSUSERS = REPO / "deploy" / "systemd" / "kvstrata.sysusers"


def analyze() -> str:
    path = shutil.which("systemd-analyze")
    assert path, "systemd-analyze is missing: scripts/setup.sh installs the systemd package"
    return path


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Path]:
    """An offline root: the system's units, the unit under test, the built kvstratad at
    the unit's ExecStart path (verify checks that the command exists)."""
    units = next(p for p in (Path("/usr/lib/systemd/system"), Path("/lib/systemd/system"))
                 if p.is_dir())
    shutil.copytree(units, tmp_path / "usr/lib/systemd/system", symlinks=True)
    (tmp_path / "etc/systemd/system").mkdir(parents=True)
    shutil.copy(UNIT, tmp_path / "etc/systemd/system" / UNIT.name)
    exec_start = re.search(r"^ExecStart=(\S+)", UNIT.read_text(), re.M).group(1)
    target = tmp_path / exec_start.lstrip("/")
    target.parent.mkdir(parents=True)
    shutil.copy(daemon_binary(), target)
    yield tmp_path


def test_unit_verifies_without_warnings(root: Path) -> None:
    proc = subprocess.run([analyze(), "verify", f"--root={root}", UNIT.name],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == "" and proc.stdout.strip() == "", (
        f"systemd-analyze verify warned:\n{proc.stdout}{proc.stderr}")


def test_a_broken_unit_is_caught(root: Path) -> None:
    """The check above is not vacuous: an unknown key makes verify print a warning."""
    unit = root / "etc/systemd/system" / UNIT.name
    unit.write_text(unit.read_text().replace("Restart=on-failure", "Restart=sometimes"))
    proc = subprocess.run([analyze(), "verify", f"--root={root}", UNIT.name],
                          capture_output=True, text=True, timeout=60)
    assert "sometimes" in proc.stderr


def test_sandbox_exposure_is_ok(root: Path) -> None:
    proc = subprocess.run([analyze(), "security", "--offline=true", f"--root={root}",
                           UNIT.name], capture_output=True, text=True, timeout=60)
    found = re.search(r"Overall exposure level for \S+: ([0-9.]+) (\w+)", proc.stdout)
    assert found, proc.stdout + proc.stderr
    assert float(found.group(1)) <= 2.5, proc.stdout


def test_hardening_directives() -> None:
    text = UNIT.read_text()
    for line in ["User=kvstrata", "Group=kvstrata", "RuntimeDirectory=kvstrata",
                 "LimitMEMLOCK=infinity", "Restart=on-failure", "NoNewPrivileges=yes",
                 "ProtectSystem=strict", "CapabilityBoundingSet=", "DevicePolicy=closed"]:
        assert re.search(rf"^{re.escape(line)}$", text, re.M), f"missing {line}"
    assert re.search(r"^u kvstrata ", SYSUSERS.read_text(), re.M)


def test_config_file_is_valid_and_matches_the_unit() -> None:
    proc = subprocess.run([str(daemon_binary()), f"--config={CONFIG}", "--check_config"],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = CONFIG.read_text()
    assert 'socket = "/run/kvstrata/kvstrata.sock"' in text  # RuntimeDirectory=kvstrata
    assert 'path = "/var/cache/kvstrata/l2"' in text          # CacheDirectory=kvstrata
    assert f"--config=/etc/kvstrata/{CONFIG.name}" in UNIT.read_text()
