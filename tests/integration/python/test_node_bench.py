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
                     ("none:rr+rr", "twice"), ("", "empty")):
        with pytest.raises(ValueError, match=msg):
            roles.parse_plan(bad)


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

    def fake_role(role, modes):
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
