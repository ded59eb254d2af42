"""Helpers of the tier tests (test_tiers.py, test_tier_faults.py, test_l3_gluster.py,
test_object_tier.py): namespaces, settings of L2 and L3, daemons with a session (Node), stores
in batches, a writer to kill a daemon under, exact-or-missing loads; their fixtures `workdir`
and `cli` are in conftest.py.
"""
from __future__ import annotations

import itertools
import os
import threading
from pathlib import Path
from typing import Dict, List

import numpy as np

import kvstrata
from host_child import block_bytes, chain_keys
from kvs_testing import Daemon, mha_spec, wait_until

KIB, MIB = 1 << 10, 1 << 20
BLOCK = 64 * KIB
FILE_BYTES = 4 * KIB + BLOCK  # 4 KiB header + payload (already 4 KiB-aligned)
_salts = itertools.count()


def spec(salt: str) -> dict:
    return mha_spec(kv_layout="opaque", dtype="uint8", opaque_block_bytes=BLOCK, salt=salt)


def fresh_salt(name: str) -> str:
    return f"tiers-{name}-{os.getpid()}-{next(_salts)}"


def blocks(seed: int, count: int) -> List[np.ndarray]:
    return [block_bytes(seed, i, BLOCK) for i in range(count)]


def l2_settings(root: Path, **extra: str) -> Dict[str, str]:
    return {"l2.enabled": "true", "l2.path": str(root), "l2.capacity": "256MiB", **extra}


def l3_settings(root: Path, **extra: str) -> Dict[str, str]:
    return {"l3.enabled": "true", "l3.path": str(root), "l3.capacity": "256MiB",
            "l3.eviction_interval_ms": "200", **extra}


def tier(client: kvstrata.Client, which: int):
    return next(t for t in client.list_tiers().tiers if t.tier == which)


def block_files(root: Path) -> List[Path]:
    return [p for p in root.rglob("*.kv") if ".quarantine" not in p.parts]


def wait_written(client: kvstrata.Client, which: int, count: int, timeout_s: float = 20.0) -> None:
    ok = wait_until(lambda: (t := tier(client, which)).queue_depth == 0 and
                    t.written_blocks >= count, timeout_s)
    assert ok, f"tier {which} did not write {count} blocks: {tier(client, which)}"


class Node:
    """One daemon with a session and a registered namespace."""

    def __init__(self, workdir: Path, settings: Dict[str, str], salt: str, name: str = "a"):
        self.daemon = Daemon(workdir, settings, socket=workdir / f"{name}.sock").start()
        self.client = self.daemon.client(timeout=30.0)
        self.session = kvstrata.Session(self.client, client_name=f"pytest-tiers-{name}")
        self.ns = self.session.register_namespace(**spec(salt))

    def close(self, expect_clean: bool = True) -> None:
        try:
            self.session.close()
        except kvstrata.KVStrataError:
            pass
        self.client.close()
        if expect_clean:
            assert self.daemon.running(), self.daemon.log_tail()
            assert self.daemon.stop() == 0, self.daemon.log_tail()
        else:
            self.daemon.kill()


def assert_loads(node: Node, keys: List[bytes], data: List[np.ndarray], lease_id: int = 0) -> None:
    got = node.session.load(node.ns, keys, lease_id=lease_id)
    assert list(got) == [True] * len(keys), \
        f"missing blocks: {list(got)}\n{node.client.list_tiers()}\n{node.client.get_stats()}"
    for i, (b, want) in enumerate(zip(got.blocks, data)):
        assert np.array_equal(b, want), f"block {i} differs"


def store_in_batches(node: Node, keys, data, batch: int = 50) -> int:
    stored = 0
    for i in range(0, len(keys), batch):
        stored += node.session.store(node.ns, keys[i:i + batch], data[i:i + batch]).stored
    return stored


def close_all(*nodes: Node) -> None:
    """Stops every node, even when one fails (then raises the first failure)."""
    failures = []
    for n in nodes:
        try:
            n.close()
        except BaseException as e:  # noqa: B902 - close the others first
            n.daemon.kill()
            failures.append(e)
    if failures:
        raise failures[0]


def assert_exact_or_missing(got, data: List[np.ndarray], what: str) -> int:
    """Every block the load returned is the stored one; returns how many it returned."""
    for i, (ok, block) in enumerate(zip(got, got.blocks)):
        if ok:
            assert np.array_equal(block, data[i]), f"{what}: block {i} has wrong bytes"
    return sum(bool(ok) for ok in got)


class ChainWriter:
    """Stores chains of 8 blocks (`<name>-<batch>`: chain_keys, blocks(batch, 8)) on a thread
    until stop() or a failed store (the daemon killed under it); `stored`: the batches the
    daemon took."""

    def __init__(self, node: Node, name: str = "kill9", batches: int = 2000) -> None:
        self.node, self.name, self.batches = node, name, batches
        self.stored: List[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def keys(self, batch: int) -> List[bytes]:
        return chain_keys(f"{self.name}-{batch}", 8)

    def start(self) -> "ChainWriter":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        for batch in range(self.batches):
            if self._stop.is_set():
                return
            try:
                self.node.session.store(self.node.ns, self.keys(batch), blocks(batch, 8))
                self.stored.append(batch)
            except kvstrata.KVStrataError:
                return
