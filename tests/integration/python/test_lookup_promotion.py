"""Promotion from L2 into L1 on a real kvstratad: a leased lookup that asks not to promote
(LookupRequest.skip_promotion, the fast path's flag bit 1) reads nothing from the disk,
one that does not ask promotes; an engine's store of blocks L2 already holds is not written
to L2 again (TierInfo.present_writes); a PromotionWatch probe promotes a bounded run and
times it (kvstrata.planning). Each test has its own daemons and namespace salt."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

import kvstrata
from kvstrata import pb
from kvstrata.planning import TierSpeeds, promotion_watch
from host_child import chain_keys
from kvs_testing import wait_until
from tier_helpers import BLOCK, Node, assert_loads, blocks, fresh_salt, l2_settings, tier, \
    wait_written

L1, L2 = pb.TIER_L1_DRAM, pb.TIER_L2_LOCAL


def _in_l2_only(workdir: Path, name: str, count: int, seed: int):
    """A daemon whose L2 holds `count` blocks and whose L1 is empty (a restart): the Node,
    the keys and their data."""
    salt, l2 = fresh_salt(name), workdir / "l2"
    keys, data = chain_keys(name, count), blocks(seed, count)
    a = Node(workdir, l2_settings(l2), salt)
    assert a.session.store(a.ns, keys, data).stored == count
    wait_written(a.client, L2, count)
    a.close()
    return Node(workdir, l2_settings(l2), salt, name="b"), keys, data


@pytest.mark.parametrize("fast_path", [True, False], ids=["fast-path", "grpc"])
def test_a_lookup_that_skips_promotion_reads_nothing_from_l2(workdir: Path, monkeypatch,
                                                             fast_path: bool) -> None:
    monkeypatch.setenv("KVSTRATA_FAST_PATH", "1" if fast_path else "0")
    b, keys, data = _in_l2_only(workdir, "skip", 8, 1)
    try:
        hit = b.session.lookup(b.ns, keys, lease=True, promote=False)
        assert hit.fast == fast_path
        assert hit.hit_blocks == 8 and hit.tiers == [L2] * 8 and hit.lease_id != 0
        many = b.session.lookup_namespaces([b.ns], keys, lease=True, promote=False)
        assert many.hit_blocks == 8 and many.lease_ids[0] != 0
        time.sleep(0.3)
        t = tier(b.client, L2)
        assert t.promoted_blocks == 0 and t.read_bytes == 0, t
        assert b.session.lookup(b.ns, keys).tiers == [L2] * 8   # still only in L2
        b.session.release_leases([hit.lease_id, many.lease_ids[0]])
        # A lookup that does not skip it promotes every hit into its lease.
        hit = b.session.lookup(b.ns, keys, lease=True)
        assert wait_until(lambda: tier(b.client, L2).promoted_blocks == 8, 10)
        assert b.session.lookup(b.ns, keys).tiers == [L1] * 8
        assert_loads(b, keys, data, lease_id=hit.lease_id)
    finally:
        b.close()


def test_a_store_of_blocks_l2_holds_is_not_written_again(workdir: Path) -> None:
    """The engine recomputed a hit it did not load and stores it: into L1 (the next lookup
    finds it there), and not queued for L2, which holds it (present_writes)."""
    b, keys, data = _in_l2_only(workdir, "present", 8, 2)
    try:
        assert b.session.store(b.ns, keys, data).stored == 8
        assert b.session.lookup(b.ns, keys).tiers == [L1] * 8
        t = tier(b.client, L2)
        assert t.present_writes == 8 and t.written_blocks == 0 and t.queue_depth == 0, t
        assert t.promoted_blocks == 0 and t.read_bytes == 0, t
        # A block L2 lacks is still written.
        more, more_data = chain_keys("present-more", 1), blocks(3, 1)
        assert b.session.store(b.ns, more, more_data).stored == 1
        wait_written(b.client, L2, 1)
        assert tier(b.client, L2).present_writes == 8
    finally:
        b.close()


class _Link:
    """The two DaemonLink calls PromotionWatch makes, over one session."""

    def __init__(self, session: kvstrata.Session) -> None:
        self._session = session

    def session(self) -> kvstrata.Session:
        return self._session

    def guard(self, what, fn, default):
        try:
            return fn()
        except kvstrata.KVStrataError:
            return default


def test_a_probe_promotes_a_bounded_run_and_times_it(workdir: Path, monkeypatch) -> None:
    monkeypatch.setattr(promotion_watch, "PROBE_BYTES", 3 * BLOCK)
    b, keys, _ = _in_l2_only(workdir, "probe", 8, 4)
    speeds = TierSpeeds()
    watch = promotion_watch.PromotionWatch(_Link(b.session), speeds)
    try:
        assert watch.probe(int(L2), [b.ns], keys, BLOCK) == 3
        assert watch.probe(int(L2), [b.ns], keys, BLOCK) == 0   # one per tier at a time
        assert wait_until(lambda: speeds._samples.get(int(L2)), 10), "the probe was timed"
        assert tier(b.client, L2).promoted_blocks == 3
        assert b.session.lookup(b.ns, keys).tiers == [L1] * 3 + [L2] * 5
        assert watch.probe(int(L2), [b.ns], keys[3:], BLOCK) == 0      # PROBE_EVERY_S
        monkeypatch.setattr(promotion_watch, "PROBE_EVERY_S", 0.0)
        assert wait_until(lambda: watch.probe(int(L2), [b.ns], keys[3:], BLOCK) == 3, 10)
        assert wait_until(lambda: tier(b.client, L2).promoted_blocks == 6, 10)
    finally:
        watch.close()
        b.close()
