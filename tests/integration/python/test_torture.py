"""A short churn soak (tests/torture/torture.py) as a test: worker processes storing and
loading with every byte verified while workers are SIGKILLed, paused past their heartbeat
deadline, admin calls run and the daemon is killed -9 and restarted, with idle and
half-open connections on every socket; no wrong byte, nothing leaked, no growth past the
bounds, no call left unanswered for a second."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

TORTURE = Path(__file__).resolve().parents[2] / "torture" / "torture.py"


def test_short_torture_run_has_no_wrong_bytes_and_no_leaks() -> None:
    proc = subprocess.run([sys.executable, str(TORTURE), "--seconds", "20", "--workers", "3",
                           "--chaos-interval", "1.0"],
                          capture_output=True, text=True, timeout=180)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "wrong bytes: 0 blocks" in out and "leaks: none" in out, out[-2000:]
    assert "unanswered: 0 of" in out and "OVER" not in out, out[-2000:]
