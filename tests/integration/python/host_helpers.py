"""Helpers of the host-mode tests (test_host_mode.py, test_host_mode_errors.py); their
daemons and sessions are fixtures in conftest.py (host_daemon, small_daemon, hclient,
hsession, sclient, ssession). opaque_spec() gives every test its own namespace (a unique
salt); run_child() runs host_child.py as a second client.
"""
from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import numpy as np

import kvstrata
from kvstrata import pb
from host_child import block_bytes
from kvs_testing import Daemon, mha_spec

KIB, MIB = 1 << 10, 1 << 20
BLOCK = 64 * KIB
HOST_SETTINGS = {"l1.capacity": "64MiB", "l1.slab_size": "4MiB", "l2.enabled": "false"}
SMALL_SETTINGS = {"l1.capacity": "8MiB", "l1.slab_size": "1MiB", "l2.enabled": "false"}
CHILD = Path(__file__).resolve().parent / "host_child.py"
_salts = itertools.count()


def opaque_spec(block: int = BLOCK, salt: str = "") -> dict:
    """An opaque namespace of `block` bytes per block; a fresh salt unless one is given."""
    return mha_spec(kv_layout="opaque", dtype="uint8", opaque_block_bytes=block,
                    salt=salt or f"host-{os.getpid()}-{next(_salts)}")


def blocks_for(seed: int, count: int, nbytes: int = BLOCK) -> List[np.ndarray]:
    return [block_bytes(seed, i, nbytes) for i in range(count)]


def l1_tier(client: kvstrata.Client):
    return next(t for t in client.list_tiers().tiers if t.tier == pb.TIER_L1_DRAM)


def run_child(mode: str, daemon: Daemon, timeout: float = 60.0, **args) -> subprocess.CompletedProcess:
    payload = json.dumps({"endpoint": daemon.endpoint, **args})
    return subprocess.run([sys.executable, str(CHILD), mode, payload], capture_output=True,
                          text=True, timeout=timeout, cwd=str(CHILD.parent))


def child_json(proc: subprocess.CompletedProcess) -> Dict:
    lines = [l for l in proc.stdout.splitlines() if l.startswith("{")]
    assert lines, f"child printed nothing (rc={proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return json.loads(lines[-1])
