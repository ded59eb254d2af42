"""bench/node's pure-Python logic (no vLLM, no GPU, no network): the router, the workload
generator, the plan parser, the Prometheus parser, the per-mode stats, the output comparison
and the summary."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench" / "node"))

import metrics  # noqa: E402
import report  # noqa: E402
import roles  # noqa: E402
import stats  # noqa: E402
from router import Router  # noqa: E402
from workload import WorkloadSpec, make_conversations  # noqa: E402

SPEC = WorkloadSpec(conversations=5, turns=3, prefix_tokens=20, documents=2,
                    first_user_tokens=7, user_tokens=4, max_tokens=3, vocab=500)


def test_round_robin_cycles_request_by_request():
    r = Router("rr", 3)
    assert [r.acquire("a") for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    assert r.sent == [3, 2, 2]


def test_least_picks_fewest_in_flight_and_spreads_ties():
    r = Router("least", 2)
    assert r.acquire("a") == 0
    assert r.acquire("b") == 1          # 0 is busy
    r.release(0)
    assert r.acquire("c") == 0          # 0 free, 1 busy
    r.release(0)
    r.release(1)
    assert [r.acquire("d"), r.acquire("e")] == [1, 0]  # tie: the one after the last pick
    with pytest.raises(RuntimeError):
        Router("least", 2).release(0)


def test_sticky_keeps_conversations_and_balances_first_placement():
    r = Router("sticky", 2)
    first = [r.acquire(c) for c in ("a", "b", "c", "d")]
    assert first == [0, 1, 0, 1]
    assert [r.acquire(c) for c in ("b", "a", "d", "c", "a")] == [1, 0, 1, 0, 0]


def test_router_refuses_unknown_mode():
    with pytest.raises(ValueError, match="unknown routing mode"):
        Router("random", 2)


def test_workload_turns_append_answers_and_share_documents():
    convs = make_conversations(SPEC, "7-rr")
    again = make_conversations(SPEC, "7-rr")
    other = make_conversations(SPEC, "7-sticky")
    assert [c.prompt() for c in convs] == [c.prompt() for c in again]   # seeded
    assert convs[0].prompt()[:20] != other[0].prompt()[:20]              # fresh per mode
    assert convs[0].document == convs[2].document != convs[1].document   # i % documents
    c = convs[0]
    p1 = c.prompt()
    assert len(p1) == 27 and c.next_turn == 1
    c.add_answer([1, 2, 3])
    p2 = c.prompt()
    assert p2[:27] == p1 and p2[27:30] == [1, 2, 3] and len(p2) == 34
    c.add_answer([4, 5, 6])
    assert len(c.prompt()) == SPEC.last_prompt_tokens() == 41
    c.add_answer([7, 8, 9])
    assert c.done
    with pytest.raises(RuntimeError):
        c.add_answer([0])
    assert all(min(p) >= 125 and max(p) < 499 for p in (p1,))            # clear of low ids
    assert SPEC.prompt_tokens_total() == 5 * (27 + 34 + 41)
    assert SPEC.unique_tokens() == 2 * 20 + 5 * (41 - 20 + 3)


def test_workload_validation():
    with pytest.raises(ValueError, match="turns"):
        WorkloadSpec(**{**SPEC.__dict__, "turns": 0}).validate()
    with pytest.raises(ValueError, match="user_tokens"):
        WorkloadSpec(**{**SPEC.__dict__, "user_tokens": 0}).validate()


def test_plan_parser():
    assert roles.parse_plan("none:rr,native:rr+sticky") == [("none", ["rr"]),
                                                            ("native", ["rr", "sticky"])]
    for bad, msg in (("none", "ROLE:MODE"), ("foo:rr", "unknown role"),
                     ("none:zz", "unknown routing mode"), ("none:rr,none:least", "twice"),
                     ("none:rr+rr", "twice"), ("", "empty"), ("none:rr*0", "MODE\\*N"),
                     ("none:rr*x", "MODE\\*N"), ("none:zz*2", "unknown routing mode"),
                     ("none:rr*2+rr.2", "twice")):
        with pytest.raises(ValueError, match=msg):
            roles.parse_plan(bad)
    # MODE*N: N runs of one routing on the same replicas, each with its own conversations.
    assert roles.parse_plan("kvstrata:rr+sticky*3") == [
        ("kvstrata", ["rr", "sticky", "sticky.2", "sticky.3"])]
    assert [roles.routing(m) for m in ("sticky", "sticky.3", "rr")] == ["sticky", "sticky", "rr"]
    import run
    assert len({run.mode_seed({"seed": 1}, m) for m in ("sticky", "sticky.2", "sticky.3")}) == 3


def test_kv_transfer_configs():
    assert roles.kv_transfer("none", 0, 16, 1, None, None) is None
    native = roles.kv_transfer("native", 1, 16, 123, None, None)
    assert native["kv_connector"] == "OffloadingConnector"
    assert native["kv_connector_extra_config"] == {"spec_name": "CPUOffloadingSpec",
                                                   "cpu_bytes_to_use": 123, "block_size": 16}
    kvs = roles.kv_transfer("kvstrata", 0, 16, 1, "/x.sock", None)
    assert kvs["kv_connector_module_path"] == "kvstrata_vllm"
    assert kvs["kv_connector_extra_config"] == {"endpoint": "/x.sock"}
    inline = roles.kv_transfer("kvstrata_inline", 0, 16, 1, "/x.sock", None)
    assert inline["kv_connector_extra_config"] == {
        "endpoint": "/x.sock", "load_planner": "off", "namespace": {"salt": "inline-role"}}
    assert roles.uses_daemon("kvstrata_inline") and not roles.uses_daemon("native")
    async_ = roles.kv_transfer("kvstrata_async", 0, 16, 1, "/x.sock", None)
    assert async_["kv_connector_extra_config"] == {
        "endpoint": "/x.sock", "load_mode": "async", "namespace": {"salt": "async-role"}}
    assert roles.uses_daemon("kvstrata_async")
    with pytest.raises(ValueError):
        roles.kv_transfer("lmcache", 0, 16, 1, None, None)


def test_prometheus_parse_and_delta():
    text = """# HELP vllm:prefix_cache_hits_total hits
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 100.0
vllm:prefix_cache_hits_created{engine="0",model_name="m"} 1.7e9
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 400.0
vllm:external_prefix_cache_hits_total{engine="0"} 32.0
vllm:kvstrata_hit_tokens_total{engine="0"} 32.0
vllm:kvstrata_hit_tokens_total{engine="1"} 8.0
vllm:time_to_first_token_seconds_bucket{le="0.1"} 3.0
process_cpu_seconds_total 5.0
"""
    m = metrics.parse(text)
    assert m == {"vllm:prefix_cache_hits": 100.0, "vllm:prefix_cache_queries": 400.0,
                 "vllm:external_prefix_cache_hits": 32.0, "vllm:kvstrata_hit_tokens": 40.0}
    after = dict(m, **{"vllm:prefix_cache_hits": 150.0, "vllm:num_preemptions": 2.0})
    d = metrics.delta(m, after)
    assert d["vllm:prefix_cache_hits"] == 50.0 and d["vllm:num_preemptions"] == 2.0
    assert metrics.delta(None, after) is None
    assert metrics.total([d, None, d])["vllm:prefix_cache_hits"] == 100.0


def rec(conv, turn, ttft, tokens, lp, cached=0, prompt=100, error=None):
    return {"conv": conv, "turn": turn, "ttft_s": ttft, "latency_s": ttft + 0.1,
            "token_ids": tokens, "first_logprob": lp, "cached_tokens": cached,
            "prompt_tokens": prompt, "error": error, "replica": 0}


def test_percentile_nearest_rank():
    assert stats.percentile([], 50) is None
    assert stats.percentile([3, 1, 2], 50) == 2
    assert stats.percentile(list(range(1, 101)), 99) == 99
    assert stats.percentile(list(range(1, 101)), 100) == 100


def test_summarize_splits_turns_and_counts_cache():
    run = {"wall_s": 2.0, "sent_per_replica": [2, 1], "requests": [
        rec("a", 1, 0.5, [1], -1.0, cached=0), rec("a", 2, 0.1, [2], -1.0, cached=80),
        rec("b", 1, 0.7, [3], -1.0, error="HTTP 500")]}
    s = stats.summarize(run)
    assert s["requests"] == 3 and s["errors"] == 1 and s["req_per_s"] == 1.0
    assert s["prompt_tokens"] == 200 and s["prompt_tok_per_s"] == 100
    assert s["ttft_turn1_ms"]["p50"] == 500.0 and s["ttft_later_ms"]["p99"] == 100.0
    assert s["cached_frac"] == 0.4 and s["cached_frac_later"] == 0.8


def test_compare_counts_token_and_logprob_mismatches():
    ref = [rec("a", 1, 0.1, [1, 2], -0.5), rec("a", 2, 0.1, [3], -0.5),
           rec("b", 1, 0.1, [5], -0.5)]
    got = [rec("a", 1, 0.1, [1, 9], -0.5), rec("a", 2, 0.1, [3], -0.5),
           rec("b", 1, 0.1, [5], -0.6), rec("c", 1, 0.1, [5], -0.6)]
    c = stats.compare(ref, got, logprob_tol=0.05)
    assert c["compared"] == 3 and c["token_mismatches"] == 1
    assert c["logprob_mismatches"] == 1 and c["after_mismatch"] == 1
    assert abs(c["max_abs_dlogprob"] - 0.1) < 1e-9 and len(c["examples"]) == 2


def test_report_references_and_render():
    def res(tokens):
        return {"requests": [rec("a", 1, 0.1, tokens, -0.5)], "wall_s": 1.0,
                "sent_per_replica": [1, 0], "metrics": {"vllm:prefix_cache_hits": 5.0},
                "summary": stats.summarize({"wall_s": 1.0, "sent_per_replica": [1, 0],
                                            "requests": [rec("a", 1, 0.1, tokens, -0.5)]})}
    results = {"none:rr": res([1]), "native:rr": res([1]), "native:sticky": res([2]),
               "kvstrata:sticky": res([3])}
    assert report.reference_of(results, "native", "rr") == "none:rr"
    assert report.reference_of(results, "kvstrata", "sticky") == "native:sticky"
    assert report.reference_of(results, "none", "rr") is None
    cmp = report.comparisons(results, 0.01)
    assert set(cmp) == {"native:rr", "kvstrata:sticky"}
    assert cmp["kvstrata:sticky"][1]["token_mismatches"] == 1
    spec = {"workload": SPEC.__dict__, "replicas": 2, "smoke": True, "model": "m",
            "dtype": "float32", "enforce_eager": True, "gpu_blocks": 10, "block_size": 16,
            "concurrency": 4, "prompt_tokens_per_mode": 1, "distinct_tokens_per_mode": 320,
            "cpu_bytes_per_replica": 1 << 30, "logprob_tol": 0.01, "plan": [["none", ["rr"]]],
            "l1_bytes": 2 << 30}
    text = report.render(spec, results, {"none": 50.0}, {"lmcache": "blocked: no wheel"},
                         ["kvstrata:rr"])
    assert "1/1 token, 0 logprob mismatches vs native:sticky" in text
    assert "lmcache:*" in text and "blocked: no wheel" in text
    assert "not run yet (run again with --continue): kvstrata:rr" in text
    assert "Medians over the runs" not in text           # no routing ran twice
    results["kvstrata:sticky.2"] = res([3])
    text = report.render(spec, results, {}, {}, [])
    assert "Medians over the runs" in text
    medians = text.split("Medians over the runs")[1]
    row = next(line for line in medians.splitlines() if line.startswith("kvstrata:sticky "))
    assert row.split()[1] == "2"                          # two runs of kvstrata's sticky
    assert report.reference_of(results, "kvstrata", "sticky.2") is None  # no other role ran it


def test_run_options_smoke_defaults_and_continue_plan():
    import run
    args = run.parse_args(["--out", "/tmp/x", "--smoke", "--conversations", "3"])
    assert args.plan == run.SMOKE["plan"] and args.block_size == 32
    assert args.conversations == 3                      # the command line wins
    assert run.parse_args(["--out", "/tmp/x"]).plan is None   # DEFAULT_PLAN then
    with pytest.raises(SystemExit):
        run.parse_args(["--out", "/tmp/x", "--plan", "none:foo"])
    plan = run.extend_plan([["none", ["rr"]], ["kvstrata", ["rr"]]],
                           roles.parse_plan("kvstrata:rr+sticky,lmcache:rr"))
    assert run.plan_text(plan) == "none:rr,kvstrata:rr+sticky,lmcache:rr"


def test_budget_stops_before_a_role_that_would_not_fit(tmp_path, monkeypatch):
    import run
    out = tmp_path / "out"
    args = run.parse_args(["--out", str(out), "--budget-s", "100",
                           "--serve-args=--max-num-batched-tokens 8192"])
    out.mkdir()
    spec = {"plan": [["none", ["rr"]], ["kvstrata", ["rr", "sticky"]]], "smoke": False}
    state = {"spec": spec, "results": {},
             "timings": {"start": [50.0], "mode": [30.0], "stop": [5.0]}}
    r = run.Run(args, spec, tmp_path, state)
    clock = {"t": 0.0}
    ran = []

    def fake_role(role, modes, faults=None):
        ran.append((role, modes))
        for m in modes:
            state["results"][f"{role}:{m}"] = {}
        clock["t"] += 60.0

    monkeypatch.setattr(r, "elapsed", lambda: clock["t"])
    monkeypatch.setattr(r, "run_role", fake_role)
    r.run()
    assert ran == [("none", ["rr"])]          # 60 s + 85 s needed > 100 s: kvstrata waits
    assert r.left() == ["kvstrata:rr", "kvstrata:sticky"]
    assert (tmp_path / "state.json").is_file() and (out / "node.json").is_file()
    assert run.shlex.split(args.serve_args) == ["--max-num-batched-tokens", "8192"]


# ---------------------------------------------------------------- faults (issue 41 item 3)

import faults  # noqa: E402


def test_router_skips_a_dead_replica_in_every_mode():
    r = Router("rr", 3)
    r.mark_dead(1)
    assert [r.acquire("a") for _ in range(4)] == [0, 2, 0, 2]
    r.mark_alive(1)
    assert [r.acquire("a") for _ in range(3)] == [0, 1, 2]
    least = Router("least", 2)
    least.mark_dead(0)
    assert [least.acquire(c) for c in "abc"] == [1, 1, 1]     # busy, but the only live one
    sticky = Router("sticky", 3)
    assert [sticky.acquire(c) for c in "abcdef"] == [0, 1, 2, 0, 1, 2]
    sticky.mark_dead(2)
    assert sticky.acquire("c") in (0, 1) and sticky.rehomed == 1
    moved = sticky.home("c")
    assert sticky.acquire("c") == moved and sticky.rehomed == 1  # stays on its new home
    assert sticky.acquire("f") == 1 - moved                     # the other one: fewest convs
    assert sticky.acquire("a") == 0 and sticky.home("zz") == -1
    for i in (0, 1):
        sticky.mark_dead(i)
    with pytest.raises(RuntimeError, match="no live replica"):
        sticky.acquire("a")


def test_parse_faults():
    assert faults.parse_faults("") == [] and faults.parse_faults("none") == []
    assert faults.parse_faults("kill, restart") == ["kill", "restart"]
    for bad, msg in (("reboot", "unknown fault"), ("kill,kill", "twice")):
        with pytest.raises(ValueError, match=msg):
            faults.parse_faults(bad)


def frec(conv, start, ttft, cached, prompt=100, replica=1, turn=2, error=None):
    return {"conv": conv, "turn": turn, "start_s": start, "ttft_s": ttft,
            "end_s": start + (ttft or 0.05) + 0.05, "cached_tokens": cached,
            "prompt_tokens": prompt, "replica": replica, "error": error}


def test_time_to_first_hit_counts_only_hits_beyond_own_gpu_cache():
    doc = list(range(40))
    prompts = {("a", 4): doc + [1] * 60, ("b", 4): doc + [2] * 60, ("c", 4): doc + [3] * 60,
               ("d", 4): [9] * 100}
    # a: first, nothing cached; b: the document only (a sent before: its own GPU cache);
    # c: 64 of its own history (a node cache's hit); d: shares nothing, errors
    recs = [frec("a", 0.10, 0.20, 0, turn=4), frec("b", 0.12, 0.30, 32, turn=4),
            frec("c", 0.50, 0.10, 64, turn=4),
            frec("d", 0.05, None, 0, turn=4, error="HTTP 500")]
    faults.annotate_own_prefix(recs, prompts, block=16)
    own = {r["conv"]: r["own_prefix"] for r in recs}
    assert own == {"a": 32, "b": 32, "c": 32, "d": 0}  # 40 shared -> 32 in whole blocks
    hits = faults.first_hits(recs)
    assert hits == {"first_cached_s": 0.42, "first_hit_s": 0.6}
    n = faults.restart_numbers(recs, 2, {"a": "R", "b": "others", "c": "others", "d": "R"})
    assert n["first_n"] == 2                         # d and a (by start), d failed
    assert n["first_n_fractions"] == {"requests": 1, "cached_frac": 0.0, "beyond_own_frac": 0.0}
    assert n["all_fractions"] == {"requests": 3, "cached_frac": round(96 / 300, 4),
                                  "beyond_own_frac": round(32 / 300, 4)}
    assert n["by_home"]["others"]["beyond_own_frac"] == 0.16 and n["errors"] == 1
    assert faults.first_hits([frec("a", 0, 0.1, 16)]) == {"first_cached_s": 0.1,
                                                          "first_hit_s": 0.1}  # no own_prefix
    assert faults.first_hits([]) == {"first_cached_s": None, "first_hit_s": None}
    assert "PASS (0.6 s)" in faults.restart_target(True, 0.6)
    assert "MISS (1.5 s)" in faults.restart_target(True, 1.5)
    assert "MISS (no hit)" in faults.restart_target(True, None)
    assert "no target" in faults.restart_target(False, None)


def test_kill_windows_split_the_others_ttft_by_first_token_time():
    recs = [frec("a", 0.0, 0.1, 0, replica=0),      # 0.1: before the 9 s window
            frec("b", 1.0, 0.2, 0, replica=0, turn=1),   # 1.2: before
            frec("c", 5.0, 0.4, 0, replica=0),      # 5.4: before
            frec("d", 9.9, 0.5, 0, replica=0),      # 10.4: after (started before the kill)
            frec("e", 12.0, 0.3, 0, replica=0),     # 12.3: after
            frec("f", 25.0, 0.2, 0, replica=0),     # 25.2: rest (after 19 s)
            frec("g", 9.0, 5.0, 0, replica=1),      # the killed replica: not counted
            frec("h", 10.0, None, 0, replica=1, error="ServerDisconnectedError"),
            frec("i", 11.0, None, 0, replica=0, error="HTTP 500")]
    w = faults.window_stats(recs, kill_s=10.0, window_s=9.0, victim=1)
    assert w["before"] == {"n": 2, "turn1": 1, "p50_ms": 200.0, "p99_ms": 400.0}
    assert w["after"] == {"n": 2, "turn1": 0, "p50_ms": 300.0, "p99_ms": 500.0}
    assert w["rest"]["n"] == 1 and w["p99_ratio"] == 1.25
    e = faults.error_counts(recs, victim=1)
    assert (e["total"], e["on_killed"], e["on_others"]) == (2, 1, 1)
    assert "MISS (1.25x)" in faults.kill_target(1.25)
    assert "PASS (1.1x)" in faults.kill_target(1.1)
    assert "MISS (no figure" in faults.kill_target(None)
    empty = faults.window_stats(recs, kill_s=100.0, window_s=5.0, victim=1)
    assert empty["after"]["n"] == 0 and empty["p99_ratio"] is None


def test_daemon_after_kill_follows_the_dead_engines_sessions():
    def sample(t, pids, fenced, leases=0):
        return {"t": t, "sessions": float(len(pids)), "active_leases": float(leases),
                "active_loads": 0.0, "active_reservations": 0.0,
                "kvstrata_fenced_bytes": fenced, "kvstrata_registrations_active": 1.0,
                "kvstrata_jobs_active": 0.0,
                "session_list": [{"pid": p, "client": "c", "registrations": 1,
                                  "leases": leases, "jobs": 1 if p == 7 else 0} for p in pids]}
    samples = [sample(9.8, [5, 7, 8], 0, leases=2), {"t": 10.0, "error": "timeout"},
               sample(10.2, [5, 7, 8], 4096), sample(10.7, [5], 4096), sample(11.0, [5], 0)]
    d = faults.daemon_after_kill(samples, kill_s=10.0, dead_pids=[7, 8])
    assert d["samples"] == 5 and d["sample_errors"] == 1
    assert d["before_kill"] == {"t": 9.8, "sessions": 2, "registrations": 2, "leases": 4,
                                "jobs": 1, "node_sessions": 3.0}
    assert d["first_after_kill"]["sessions"] == 2 and d["first_after_kill"]["fenced_bytes"] == 4096
    assert d["sessions_gone_after_s"] == 0.7 and d["fenced_zero_after_s"] == 1.0
    assert d["fenced_bytes_max"] == 4096 and d["last"]["sessions"] == 1.0
    assert d["last"]["kvstrata_fenced_bytes"] == 0
    assert "first_after_kill" not in faults.daemon_after_kill(samples[:1], 10.0, [7])


def test_parse_daemon_gauges():
    text = ('# TYPE kvstrata_fenced_bytes gauge\nkvstrata_fenced_bytes 8192\n'
            'kvstrata_jobs_active{kind="store"} 2\nkvstrata_jobs_active{kind="load"} 1\n'
            'kvstrata_lookups_total 5\n')
    assert faults.parse_gauges(text) == {"kvstrata_fenced_bytes": 8192.0,
                                         "kvstrata_jobs_active": 3.0}


def fault_results():
    restart = {"fault": "restart", "role": "kvstrata", "replica": 1, "stop_s": 4.2,
               "to_health_s": 61.5, "target": faults.restart_target(True, 0.42),
               "numbers": {"first_hit_s": 0.42, "first_cached_s": 0.3, "first_n": 16,
                           "first_n_fractions": {"requests": 16, "cached_frac": 0.85,
                                                 "beyond_own_frac": 0.6},
                           "all_fractions": {"requests": 48, "cached_frac": 0.88,
                                             "beyond_own_frac": 0.62},
                           "by_home": {"R": {"beyond_own_frac": 0.61},
                                       "others": {"beyond_own_frac": 0.63}},
                           "ttft_ms": {"p50": 120.0, "p99": 480.0}, "errors": 0}}
    native = {**restart, "role": "native", "target": faults.restart_target(False, None),
              "numbers": {**restart["numbers"], "first_hit_s": None}}
    kill = {"fault": "kill", "role": "kvstrata", "replica": 1, "mode": "sticky",
            "kill_after_s": 12.0, "window_s": 10.0, "kill_s": 12.4,
            "in_flight_at_kill": {"c1": 2, "c3": 3}, "pids": [11, 12], "limit_after": 8,
            "rehomed": 24, "retried": 2,
            "errors": {"total": 2, "on_killed": 2, "on_others": 0, "examples": []},
            "windows": {"before": {"n": 40, "turn1": 10, "p50_ms": 150.0, "p99_ms": 400.0},
                        "after": {"n": 38, "turn1": 0, "p50_ms": 160.0, "p99_ms": 420.0},
                        "rest": {"n": 60, "turn1": 0, "p50_ms": 140.0, "p99_ms": 380.0},
                        "p99_ratio": 1.05},
            "target": faults.kill_target(1.05),
            "daemon": {"before_kill": {"sessions": 2, "registrations": 2, "leases": 3, "jobs": 1},
                       "first_after_kill": {"t": 12.6, "sessions": 0, "fenced_bytes": 0.0},
                       "sessions_gone_after_s": 0.2, "fenced_bytes_max": 0.0,
                       "fenced_zero_after_s": 0.2,
                       "last": {"sessions": 2.0, "active_leases": 0.0, "active_loads": 0.0,
                                "active_reservations": 0.0,
                                "kvstrata_registrations_active": 2.0,
                                "kvstrata_jobs_active": 0.0, "kvstrata_fenced_bytes": 0.0}}}
    return {"kvstrata:restart": restart, "native:restart": native, "kvstrata:kill": kill,
            "native:kill": {"fault": "kill", "kill_s": None, "kill_after_s": 12.0,
                            "first_turns_done_s": 1.8, "window_s": 10.0},
            "none:restart": {"fault": "restart", "error": "none replica 1 not healthy\nlog"}}


def test_faults_summary_lines():
    assert faults.render_faults({}) == []
    text = "\n".join(faults.render_faults(fault_results()))
    assert "Faults (issue 41 item 3" in text
    assert ("kvstrata:restart  R=1 stopped in 4.2 s, /health 61.5 s after its start command; "
            "first hit beyond own 0.42 s after /health (first cached token 0.3 s)") in text
    assert "first 16 requests: cached 85.0 %, beyond own 60.0 %; all 48: cached 88.0 %" in text
    assert "target first hit <= 1 s after /health: PASS (0.42 s)" in text
    assert "first hit beyond own never after /health" in text and "(no target: starts cold)" in text
    assert ("SIGKILL to R=1 (2 processes) at 12.4 s (sticky) with 2 in flight on it "
            "(turns 2,3); in flight after: 8") in text
    assert ("others' TTFT p50/p99: 10 s before 150/400 ms (n=40, 10 first turns); 10 s after "
            "160/420 ms (n=38, 0 first turns)") in text
    assert "errors 2 (2 on R, 0 on the others), turns sent again 2" in text
    assert "kvstratad: R's sessions 2 before the kill (registrations 2, leases 3, jobs 1)" in text
    assert "gone after 0.2 s" in text and "fenced bytes 0" in text
    assert "target others' TTFT p99 after <= 1.2x before: PASS (1.05x)" in text
    assert ("native:kill       no kill: the workload ended first (first turns done at 1.8 s, "
            "then a 10 s window; more conversations: --fault-kill-conversations)") in text
    assert "none:restart      failed: none replica 1 not healthy" in text


def test_run_fault_options_and_phases_left(tmp_path):
    import run
    args = run.parse_args(["--out", "/tmp/x", "--faults", "restart,kill",
                           "--plan", "native:sticky,kvstrata:sticky"])
    f = run.fault_spec(args)
    assert f["kinds"] == ["restart", "kill"] and f["roles"] is None   # every role of the plan
    assert f["kill_mode"] == "sticky" and f["keep_load"] and f["window_s"] == 10.0
    assert f["kill_after_s"] == 0.0 and f["kill_conversations"] == 0 and not f["kill_control"]
    assert run.fault_spec(run.parse_args(["--out", "/x", "--fault-kill-control"]))["kill_control"]
    assert run.fault_spec(run.parse_args(["--out", "/x", "--fault-kill-conversations", "256"]))[
        "kill_conversations"] == 256
    assert run.fault_spec(run.parse_args(["--out", "/x"]))["kinds"] == []
    assert run.fault_spec(run.parse_args(["--out", "/x", "--fault-roles", "kvstrata"]))[
        "roles"] == ["kvstrata"]
    for bad in (["--faults", "reboot"], ["--faults", "kill", "--replicas", "1"],
                ["--faults", "restart", "--turns", "1"], ["--fault-roles", "foo"]):
        with pytest.raises(SystemExit):
            run.parse_args(["--out", "/tmp/x"] + bad)
    spec = {"plan": [["native", ["sticky"]], ["kvstrata", ["sticky"]]], "smoke": False,
            "faults": {**f, "roles": ["kvstrata"]}}
    state = {"spec": spec, "results": {"native:sticky": {}, "kvstrata:sticky": {}},
             "faults": {"kvstrata:restart": {}}}
    r = run.Run(args, spec, tmp_path, state)
    assert r.faults_pending("native") == [] and r.faults_pending("kvstrata") == ["kill"]
    assert r.left() == ["kvstrata:kill"]
    spec["faults"]["roles"] = None                       # every role of the plan
    assert r.faults_pending("native") == ["restart", "kill"]
    assert r.left() == ["native:restart", "native:kill", "kvstrata:kill"]
    del spec["faults"]                                   # a run from before --faults
    assert r.left() == []
