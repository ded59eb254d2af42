"""kvstrata.DaemonLink, the fail-safe session both connectors hold, on a real kvstratad: no
daemon is a miss (None, one warning), the daemon's arrival is picked up, namespaces are
registered once per key, guard turns failures into defaults, refusals raise when asked."""
from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

import kvstrata
from kvs_testing import Daemon, mha_spec, wait_until


def spec(salt: str) -> dict:
    return mha_spec(kv_layout="opaque", dtype="uint8", opaque_block_bytes=4096,
                    salt=f"link-{salt}-{os.getpid()}")


def test_unreachable_then_back(sock_dir: Path, caplog) -> None:
    d = Daemon(sock_dir)
    log = logging.getLogger("kvstrata_link_test")
    link = kvstrata.DaemonLink(endpoint=d.endpoint, client_name="pytest-link", timeout=5.0,
                               retry_interval_s=0.1, log=log, without="missing out")
    caplog.set_level(logging.WARNING, logger=log.name)
    try:
        assert link.session() is None and link.session() is None
        assert link.down and link.current is None
        down = [r.getMessage() for r in caplog.records if "unreachable" in r.getMessage()]
        assert len(down) == 1 and "missing out until it is back" in down[0], down
        d.start()
        assert wait_until(lambda: link.session() is not None, 10.0), d.log_tail()
        s = link.session()
        assert s is link.current and s.connected and not link.down
        assert any("reachable again" in r.getMessage() for r in caplog.records)
        ns = link.register_namespace(s, "a", spec("a"))
        assert link.register_namespace(s, "a", spec("other")) is ns, "once per key"
        assert link.namespaces == {"a": ns}
        assert link.guard("lookup", lambda: s.lookup(ns, [b"k" * 8]).hit_blocks, -1) == 0
        assert link.guard("fails", lambda: s.lookup(ns, [b""]), -1) == -1
        assert link.errors == 1
    finally:
        link.close()
        if d.running():
            assert d.stop() == 0, d.log_tail()
    assert link.session() is None, "closed"


def test_set_namespace_registers_when_a_session_is_there(daemon: Daemon) -> None:
    link = kvstrata.DaemonLink(endpoint=daemon.endpoint, client_name="pytest-link",
                               timeout=5.0, fast_lookup=False)
    try:
        link.set_namespace("pages", spec("pages"))
        s = link.session()
        assert s is not None and not s.fast_path, "fast_lookup=False: gRPC lookups"
        ns = link.namespaces["pages"]
        assert s.lookup(ns, [b"p" * 8]).fast is False
    finally:
        link.close()


def test_refusals_raise_or_degrade(daemon: Daemon) -> None:
    bad = dict(spec("bad"), opaque_block_bytes=0)
    strict = kvstrata.DaemonLink(endpoint=daemon.endpoint, timeout=5.0, raise_refused=True)
    lenient = kvstrata.DaemonLink(endpoint=daemon.endpoint, timeout=5.0, retry_interval_s=60)
    try:
        with pytest.raises(kvstrata.KVStrataError):
            strict.set_namespace("pages", bad)
        with pytest.raises(kvstrata.KVStrataError):
            strict.session()  # raised again on every use: the operator must know
        lenient.set_namespace("pages", bad)
        assert lenient.session() is None and lenient.down
    finally:
        strict.close()
        lenient.close()


def test_missing_socket_never_raises(sock_dir: Path) -> None:
    link = kvstrata.DaemonLink(endpoint=str(sock_dir / "none.sock"), timeout=1.0,
                               raise_refused=True)
    try:
        assert link.session() is None
    finally:
        link.close()


def test_counters_set_while_the_session_opens_reach_it(daemon: Daemon) -> None:
    """set_heartbeat_counters called while session() is opening the link's session (another
    thread, the SGLang backend's planner) gives that session the provider: its heartbeats
    carry the counters (a race that once left them out)."""
    import threading

    link = kvstrata.DaemonLink(endpoint=daemon.endpoint, client_name="pytest-link-counters",
                               timeout=5.0)
    opening, go_on = threading.Event(), threading.Event()
    real_open = link._open

    def slow_open():   # the session exists (with the link's provider then: none) ...
        s = real_open()
        opening.set()  # ... but is not the link's yet
        go_on.wait(5.0)
        return s

    link._open = slow_open
    t = threading.Thread(target=link.session)
    t.start()
    try:
        assert opening.wait(5.0)
        link.set_heartbeat_counters(lambda: {"plan_recompute": 3})   # no session yet
        go_on.set()
        t.join(10.0)
        s = link.session()
        assert s is not None
        s.heartbeat()
        with daemon.client(timeout=10.0) as c:
            counters = {x.name: x.value for x in c.get_stats().client_counters}
        assert counters.get("plan_recompute") == 3, counters
    finally:
        go_on.set()
        link.close()
