"""Pages below L1: stored through the backend, written down to the daemon's L2 directory,
they are still found (batch_exists) and loaded byte-exact (batch_get_v1 waits for their
promotion into L1) after L1 was cleared, and after a daemon restart."""
from __future__ import annotations

import kvstrata
from kvs_testing import Daemon, wait_until
from sglang_pools import alloc_pages, fill_pages, keys_for, make_config, make_pool, page_bytes


def l2_tier(daemon: Daemon):
    with daemon.client(timeout=10.0) as c:
        return next(t for t in c.list_tiers().tiers if t.tier == kvstrata.pb.TIER_L2_LOCAL)


def test_pages_come_back_from_l2(daemon_factory, backends, tmp_path):
    settings = {"l2.enabled": "true", "l2.capacity": "256MiB", "l2.path": str(tmp_path / "l2")}
    d = daemon_factory(settings)
    pool = make_pool("mha", "page_first_direct", pages=24)
    b = backends(make_config({"timeout_s": 10.0}, endpoint=d.endpoint), pool)
    src = alloc_pages(pool, 8)
    fill_pages(pool, src, 200)
    keys = keys_for("l2", 8)
    assert b.batch_set_v1(keys, src) == [True] * 8
    assert wait_until(lambda: l2_tier(d).written_blocks >= 8 and l2_tier(d).queue_depth == 0,
                      20.0), l2_tier(d)

    with d.client(timeout=10.0) as c:  # drop L1 only: the pages now live in L2
        for _ in c.clear(fingerprint=b.namespace.fingerprint, tier=kvstrata.pb.TIER_L1_DRAM):
            pass
    assert b.batch_exists(keys) == 8
    dst = alloc_pages(pool, 8)
    assert b.batch_get_v1(keys, dst) == [True] * 8
    assert page_bytes(pool, dst) == page_bytes(pool, src)

    # A restarted daemon finds them in its L2 directory; the backend reconnects by itself.
    d.stop()
    d2 = daemon_factory(settings, socket=d.socket)
    assert wait_until(lambda: b.session.connected and b.batch_exists(keys) == 8, 20.0), \
        d2.log_tail()
    dst2 = alloc_pages(pool, 8)
    assert b.batch_get_v1(keys, dst2) == [True] * 8
    assert page_bytes(pool, dst2) == page_bytes(pool, src)
