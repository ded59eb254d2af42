"""Counters clients send with their heartbeats (HeartbeatRequest.counters: the load planner's
decisions) against a real kvstratad: the node totals in Admin.GetStats, in the real
`kvstrata stats` CLI (the "Load planner" section and --json) and on the metrics page, kept
after the sessions close; a provider that fails never stops the heartbeat; each class of bad
input is INVALID_ARGUMENT (or RESOURCE_EXHAUSTED for the daemon's distinct-name limit) with
nothing stored; a counter that goes backwards is ignored. docs/wire-protocol.md."""
from __future__ import annotations

import json
import time
from typing import Callable, Dict

import grpc
import pytest

import kvstrata
from kvs_testing import Daemon
from kvstrata.heartbeat_counters import HeartbeatCounters
from prom_text import scrape


def totals(d: Daemon) -> Dict[str, int]:
    with d.client(timeout=10.0) as c:
        return {x.name: x.value for x in c.get_stats().client_counters}


def wait_for(check: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def planner_rows(stdout: str) -> Dict[str, str]:
    """The "Load planner" section of `kvstrata stats`: {decision: hits}, and 'tokens'."""
    section = stdout.split("Load planner", 1)[1]
    rows = {}
    for line in section.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] in ("in_step", "async", "partial", "recompute"):
            rows[parts[0]] = parts[1]
        if line.startswith("tokens left to compute:"):
            rows["tokens"] = line.split(":")[1].strip()
        if line.startswith("loads that gave up at their deadline:"):
            rows["gave_up"] = line.split(":")[1].split()[0]
    return rows


def test_counters_reach_stats_and_outlive_their_sessions(daemon_factory, cli) -> None:
    d = daemon_factory()
    empty = cli(d, "stats")
    assert empty.returncode == 0, empty.stderr
    assert "no connector has reported load planner decisions" in empty.stdout
    a_counts = {"plan_in_step": 2, "plan_async": 3, "plan_partial": 0, "plan_recompute": 1,
                "plan_unloaded_tokens": 96, "load_gave_up": 2, "load_gave_up_tokens": 64}
    b_counts = {"plan_async": 10, "plan_unloaded_tokens": 4, "exists_hits": 7}
    with d.client(timeout=10.0) as ca, d.client(timeout=10.0) as cb:
        a = kvstrata.Session(ca, client_name="planner-a")
        b = kvstrata.Session(cb, client_name="planner-b")
        a.set_heartbeat_counters(lambda: dict(a_counts))
        b.set_heartbeat_counters(lambda: dict(b_counts))
        a.heartbeat()
        b.heartbeat()
        assert totals(d) == {"plan_in_step": 2, "plan_async": 13, "plan_partial": 0,
                             "plan_recompute": 1, "plan_unloaded_tokens": 100, "exists_hits": 7,
                             "load_gave_up": 2, "load_gave_up_tokens": 64}
        # Replaced, not added: the same values again change nothing.
        a.heartbeat()
        assert totals(d)["plan_async"] == 13
        out = cli(d, "stats")
        assert out.returncode == 0, out.stderr
        assert planner_rows(out.stdout) == {"in_step": "2", "async": "13", "partial": "0",
                                            "recompute": "1", "tokens": "100",
                                            "gave_up": "2"}, out.stdout
        assert "exists_hits" in out.stdout and "CLIENT COUNTER" in out.stdout
        others = out.stdout.split("CLIENT COUNTER", 1)[1]
        assert "load_gave_up" not in others, out.stdout  # in the planner's section only
        # Counted after the last heartbeat: sent with the close (a last heartbeat).
        a_counts["plan_recompute"] = 5
        a.close()
        b.close()
    after = totals(d)
    assert after["plan_recompute"] == 5 and after["plan_async"] == 13, after
    out = cli(d, "stats")
    assert planner_rows(out.stdout)["recompute"] == "5", out.stdout
    as_json = json.loads(cli(d, "--json", "stats").stdout)
    assert {c["name"]: c["value"] for c in as_json["client_counters"]} == after
    with d.client(timeout=10.0) as c:
        m = scrape(c.get_status().metrics_address)
    assert m.types["kvstrata_client_counter_total"] == "counter"
    series = {dict(labels)["name"]: v for (metric, labels), v in m.samples.items()
              if metric == "kvstrata_client_counter_total"}
    assert series == after, m.text
    # A new session of another client adds to the totals of the ended ones.
    with d.client(timeout=10.0) as cc, kvstrata.Session(cc, client_name="planner-c") as s:
        s.set_heartbeat_counters(lambda: {"plan_async": 1})
        s.heartbeat()
    assert totals(d)["plan_async"] == 14


def test_the_heartbeat_thread_sends_them_and_survives_a_failing_provider(daemon_factory):
    d = daemon_factory()
    calls = {"n": 0}

    def provider():
        calls["n"] += 1
        if calls["n"] <= 3:
            raise RuntimeError("the provider is broken")
        if calls["n"] <= 6:
            return "not a mapping"
        # The daemon would refuse these entries: dropped here, the others sent.
        return {"plan_async": calls["n"], "Bad-Name": 1, "plan_partial": -1, "x" * 65: 2}

    with d.client(timeout=10.0) as c:
        s = kvstrata.Session(c, client_name="flaky", heartbeat_timeout_ms=300)  # every 100 ms
        s.set_heartbeat_counters(provider)
        wait_for(lambda: calls["n"] > 8, "the heartbeat thread to ask the provider again")
        wait_for(lambda: totals(d).get("plan_async", 0) >= 8, "the thread's counters")
        assert s.alive and set(totals(d)) == {"plan_async"}
        assert [x.client_name for x in c.list_sessions().sessions] == ["flaky"]
        s.close()
    assert totals(d)["plan_async"] >= 8


@pytest.mark.parametrize("counters, message", [
    ({f"c_{i}": 1 for i in range(32)}, "33 entries; a heartbeat carries at most 32"),
    ({"": 1}, "a counter name is 1..64 bytes"),
    ({"a" * 65: 1}, "is 65 bytes; a counter name is 1..64 bytes"),
    ({"Plan_async": 1}, "outside [a-z0-9_]"),
    ({"plan-async": 1}, "outside [a-z0-9_]"),
    ({"plan_\u00e9": 1}, "outside [a-z0-9_]"),
])
def test_bad_counters_are_refused_and_nothing_is_stored(daemon_factory, counters, message):
    d = daemon_factory()
    with d.client(timeout=10.0) as c:
        sid = c.open_session(client_name="bad", pid=1, hostname="h").session_id
        with pytest.raises(kvstrata.KVStrataError) as err:
            c.heartbeat(session_id=sid, counters=dict(counters, plan_async=5))
        assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert message in err.value.message
        assert totals(d) == {}
        c.heartbeat(session_id=sid)  # the session is still there
        c.close_session(session_id=sid)


def test_a_counter_going_backwards_is_ignored(daemon_factory):
    d = daemon_factory()
    with d.client(timeout=10.0) as c:
        sid = c.open_session(client_name="backwards", pid=1, hostname="h").session_id
        c.heartbeat(session_id=sid, counters={"plan_async": 10, "plan_recompute": 1})
        c.heartbeat(session_id=sid, counters={"plan_async": 4, "plan_recompute": 2})
        assert totals(d) == {"plan_async": 10, "plan_recompute": 2}
        c.heartbeat(session_id=sid, counters={"plan_async": 11})
        assert totals(d) == {"plan_async": 11, "plan_recompute": 2}
        c.close_session(session_id=sid)
    assert totals(d) == {"plan_async": 11, "plan_recompute": 2}


def test_too_many_distinct_names_are_refused(daemon_factory):
    d = daemon_factory()
    with d.client(timeout=10.0) as c:
        for i in range(8):  # 8 sessions x 32 names = the daemon's 256
            sid = c.open_session(client_name="names", pid=1, hostname="h").session_id
            c.heartbeat(session_id=sid, counters={f"n_{i}_{j}": 1 for j in range(32)})
            c.close_session(session_id=sid)
        sid = c.open_session(client_name="names", pid=1, hostname="h").session_id
        c.heartbeat(session_id=sid, counters={"n_0_0": 3})  # known names still count
        with pytest.raises(kvstrata.KVStrataError) as err:
            c.heartbeat(session_id=sid, counters={"n_0_1": 3, "one_too_many": 1})
        assert err.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "at most 256 distinct counter names" in err.value.message
        t = totals(d)
        assert len(t) == 256 and t["n_0_0"] == 4 and t["n_0_1"] == 1, t
        # The Session drops what the daemon refuses and heart-beats without it.
        with kvstrata.Session(c, client_name="names-session") as s:
            s.set_heartbeat_counters(lambda: {"another_new_one": 1})
            s.heartbeat()
            assert s.alive
        c.close_session(session_id=sid)
    assert "another_new_one" not in totals(d)


def test_a_new_session_of_the_same_client_does_not_count_twice():
    """The report of a session counts from the last report a daemon took of the previous
    one (a reconnect to a new session, on the same daemon or a restarted one)."""
    hc = HeartbeatCounters()
    values = {"plan_async": 5}
    hc.set_provider(lambda: dict(values))
    send, absolute = hc.report(1)
    assert send == {"plan_async": 5}
    hc.taken(1, absolute)
    values["plan_async"] = 8
    assert hc.report(1)[0] == {"plan_async": 8}   # not taken: the daemon keeps 5
    send, absolute = hc.report(2)                  # a new session: from the 5 taken
    assert send == {"plan_async": 3}
    hc.taken(2, absolute)
    values["plan_async"] = 9
    assert hc.report(2)[0] == {"plan_async": 4}
    hc.set_provider(None)
    assert hc.report(2) == ({}, {})
    with pytest.raises(TypeError):
        hc.set_provider(42)  # type: ignore[arg-type]
