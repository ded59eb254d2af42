"""A short crash loop (tests/torture/crash_loop.py, docs/crash-contract.md): kvstratad
kill -9ed at random moments while it writes, evicts or trims, appends its journal and
updates its ledger, restarted on the same directory each time; every block loaded back
is byte-exact or a miss: 0 corrupt, 0 phantom, L1 empty at every start, no file
quarantined after a kill with no damage. L2 with power-cut damage after every third kill;
L3 on a local directory, and on the GlusterFS fixture when it can run."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

from gluster_fixture import unavailable_reason

CRASH_LOOP = Path(__file__).resolve().parents[2] / "torture" / "crash_loop.py"


def crash_loop(*args: str, timeout: float = 300, hang_rc: int = -1) -> str:
    proc = subprocess.run([sys.executable, str(CRASH_LOOP), *args], capture_output=True,
                          text=True, timeout=timeout)
    out = proc.stdout + proc.stderr
    assert proc.returncode in (0, hang_rc), out[-4000:]
    assert "corrupt: 0\n" in out and "phantom: 0\n" in out, out[-2000:]
    return out


def cycles_done(out: str) -> List[str]:
    return [ln for ln in out.splitlines() if ln.startswith("cycles: ")]


def test_l2_crash_loop_is_exact_or_miss() -> None:
    out = crash_loop("--tier", "l2", "--cycles", "6", "--power-cut-every", "3", "--seed", "11")
    assert cycles_done(out) and "6 kill -9" in cycles_done(out)[0], out[-2000:]


def test_l3_crash_loop_on_a_local_directory_is_exact_or_miss() -> None:
    out = crash_loop("--tier", "l3", "--l3-on", "local", "--cycles", "6",
                     "--power-cut-every", "3", "--seed", "12")
    assert "6 kill -9" in cycles_done(out)[0], out[-2000:]


@pytest.mark.skipif(unavailable_reason() is not None,
                    reason=f"GlusterFS: {unavailable_reason()}")
def test_l3_crash_loop_on_glusterfs_is_exact_or_miss() -> None:
    # A kill -9 that interrupts a lock request can hang the GlusterFS 10 mount (its bug;
    # docs/crash-contract.md): the loop then goes on with a fresh volume, and the hang is
    # reported as an expected failure, never as corrupt or phantom blocks.
    out = crash_loop("--tier", "l3", "--cycles", "8", "--seed", "13", "--restart-on-hang",
                     timeout=600, hang_rc=4)
    total = [ln for ln in out.splitlines() if ln.startswith("total on GlusterFS: ")]
    assert total and "corrupt 0, phantom 0" in total[0], out[-2000:]
    if "mount hangs 0" not in total[0]:
        pytest.xfail(f"GlusterFS hung after a kill -9: {total[0]}")
