"""bench/node's HTTP side against fake OpenAI-compatible replicas (no vLLM, a few seconds):
the streamed completion client (TTFT, token ids, first logprob, cached tokens from the usage
chunk), the load generator's turns through each routing mode, failed requests, and the
Prometheus scrape. Needs aiohttp (in .venv-vllm)."""
from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

pytest.importorskip("aiohttp")
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench" / "node"))

import metrics  # noqa: E402
from loadgen import run_conversations  # noqa: E402
from router import Router  # noqa: E402
from workload import WorkloadSpec, make_conversations  # noqa: E402

FIRST_TOKEN_DELAY_S = 0.03
SPEC = WorkloadSpec(conversations=6, turns=3, prefix_tokens=40, documents=1,
                    first_user_tokens=10, user_tokens=5, max_tokens=4, vocab=1000)


def answer(prompt: List[int], n: int) -> List[int]:
    """The fake model: a deterministic function of the prompt."""
    return [(sum(prompt) + 7 * k) % 900 + 50 for k in range(n)]


class InFlight:
    """Requests open at once over every fake replica (handler threads update it)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = 0
        self.most = 0

    def add(self, n: int) -> None:
        with self.lock:
            self.now += n
            self.most = max(self.most, self.now)


class FakeReplica:
    """A streamed /v1/completions (one token per chunk, the first a 200 KB line, then a usage
    chunk), /metrics and /health; records every prompt it got; `fail` makes completions answer HTTP 500."""

    def __init__(self, in_flight: InFlight) -> None:
        self.prompts: List[List[int]] = []
        self.in_flight = in_flight
        self.fail = False
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                body = (b"vllm:prefix_cache_hits_total{engine=\"0\"} %d\n"
                        % (10 * len(owner.prompts)) if self.path == "/metrics" else b"ok")
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if owner.fail:
                    self.send_response(500)
                    self.send_header("Content-Length", "4")
                    self.end_headers()
                    self.wfile.write(b"boom")
                    return
                owner.prompts.append(req["prompt"])
                owner.in_flight.add(1)
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                time.sleep(FIRST_TOKEN_DELAY_S)
                toks = answer(req["prompt"], req["max_tokens"])
                for k, t in enumerate(toks):
                    choice = {"index": 0, "text": f" t{t}" + ("x" * 200_000 if k == 0 else ""),
                              "logprobs": {"tokens": [f"token_id:{t}"],
                                           "token_logprobs": [-0.25 - k]}}
                    self.wfile.write(f"data: {json.dumps({'choices': [choice]})}\n\n".encode())
                    self.wfile.flush()
                usage = {"prompt_tokens": len(req["prompt"]), "completion_tokens": len(toks),
                         "prompt_tokens_details": {"cached_tokens": 16}}
                self.wfile.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n"
                                 "data: [DONE]\n\n".encode())
                owner.in_flight.add(-1)
                self.close_connection = True

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def replicas():
    shared = InFlight()
    reps = [FakeReplica(shared), FakeReplica(shared)]
    yield reps
    for r in reps:
        r.close()


def drive(reps: List[FakeReplica], mode: str,
          concurrency: int = 3) -> Tuple[Dict[str, Any], List[Any]]:
    convs = make_conversations(SPEC, f"t-{mode}")
    return asyncio.run(run_conversations([r.url for r in reps], "m", Router(mode, len(reps)),
                                         convs, concurrency, SPEC.max_tokens, 10.0)), convs


@pytest.mark.parametrize("mode", ["rr", "least", "sticky"])
def test_every_turn_appends_the_answer(replicas, mode):
    res, convs = drive(replicas, mode)
    recs = res["requests"]
    assert len(recs) == SPEC.conversations * SPEC.turns
    assert all(r["error"] is None for r in recs)
    assert sum(res["sent_per_replica"]) == len(recs)
    for r in recs:
        assert FIRST_TOKEN_DELAY_S <= r["ttft_s"] <= r["latency_s"]
        assert r["cached_tokens"] == 16 and r["first_logprob"] == -0.25
        assert len(r["token_ids"]) == SPEC.max_tokens
    for c in convs:  # turn t+1's prompt = turn t's prompt + its answer + the next user message
        assert c.done
        mine = sorted((r for r in recs if r["conv"] == c.conv_id), key=lambda r: r["turn"])
        p = list(c.document) + c.user_messages[0]
        for t, r in enumerate(mine):
            assert r["prompt_tokens"] == len(p)
            assert r["token_ids"] == answer(p, SPEC.max_tokens)
            if t + 1 < SPEC.turns:
                p = p + r["token_ids"] + c.user_messages[t + 1]
        if mode == "sticky":
            assert len({r["replica"] for r in mine}) == 1
    if mode == "rr":
        assert res["sent_per_replica"] == [9, 9]
    assert replicas[0].in_flight.most <= 3 + 1  # the concurrency (+ one closing)


def test_failed_requests_end_their_conversation(replicas):
    replicas[1].fail = True
    res, convs = drive(replicas, "sticky")
    failed = [r for r in res["requests"] if r["error"] is not None]
    assert failed and all(r["error"].startswith("HTTP 500") and r["replica"] == 1
                          for r in failed)
    assert all(r["turn"] == 1 for r in failed)           # no later turn was sent
    assert sum(c.done for c in convs) == SPEC.conversations - len(failed)


def test_metrics_scrape(replicas):
    drive(replicas, "rr")
    got = metrics.scrape(replicas[0].url)
    assert got == {"vllm:prefix_cache_hits": 10.0 * len(replicas[0].prompts)}
    assert metrics.scrape("http://127.0.0.1:9") is None


# ------------------------------------------------- faults: kill and restart (issue 41 item 3)

import socket  # noqa: E402

import faults  # noqa: E402

BLOCK = 8
FAULT_SPEC = WorkloadSpec(conversations=12, turns=3, prefix_tokens=40, documents=1,
                          first_user_tokens=10, user_tokens=5, max_tokens=4, vocab=1000)


class CacheReplica:
    """A fake replica with a prefix cache: cached_tokens is the longest whole-block prefix of
    the prompt in `cache` (a set of prefixes shared by every replica: a node cache; or its
    own, emptied on a restart: a per-replica cache); a prompt's blocks go in when it
    arrives. `kill` drops the server at once (streams in flight are cut) and `start` brings
    it back on the same port, /health answering after `boot_s`."""

    def __init__(self, cache: set, port: int = 0, boot_s: float = 0.0,
                 delay_s: float = 0.06) -> None:
        self.cache, self.delay_s, self.dead = cache, delay_s, False
        self.started = time.perf_counter()
        self.boot_s = boot_s
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                ready = time.perf_counter() - owner.started >= owner.boot_s
                self.send_response(200 if ready else 503)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_POST(self) -> None:
                req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                p = req["prompt"]
                hit = 0
                for k in range(BLOCK, len(p), BLOCK):
                    if tuple(p[:k]) not in owner.cache:
                        break
                    hit = k
                for k in range(BLOCK, len(p) + 1, BLOCK):
                    owner.cache.add(tuple(p[:k]))
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                toks = answer(p, req["max_tokens"])
                for k, t in enumerate(toks):
                    time.sleep(owner.delay_s / len(toks))
                    if owner.dead:  # killed: the connection drops mid-stream
                        self.connection.shutdown(socket.SHUT_RDWR)
                        self.close_connection = True
                        return
                    choice = {"index": 0, "text": f" t{t}",
                              "logprobs": {"tokens": [f"token_id:{t}"],
                                           "token_logprobs": [-0.25]}}
                    self.wfile.write(f"data: {json.dumps({'choices': [choice]})}\n\n".encode())
                    self.wfile.flush()
                if owner.dead:
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    return
                usage = {"prompt_tokens": len(p), "completion_tokens": len(toks),
                         "prompt_tokens_details": {"cached_tokens": hit}}
                self.wfile.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n"
                                 "data: [DONE]\n\n".encode())
                self.close_connection = True

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.dead = True
        self.server.shutdown()
        self.server.server_close()


class FakeSet:
    """replicas.ReplicaSet's side that faults.FaultRunner uses, over CacheReplicas."""

    def __init__(self, n: int, node_cache: bool, boot_s: float = 0.2) -> None:
        self.node = set() if node_cache else None
        self.boot_s = boot_s
        self.replicas = [CacheReplica(self.node if node_cache else set()) for _ in range(n)]
        self.closing: List[threading.Thread] = []
        self.kills: List[float] = []

    @property
    def urls(self) -> List[str]:
        return [r.url for r in self.replicas]

    def stop_one(self, i: int) -> float:
        self.replicas[i].close()
        return 0.01

    def kill_one(self, i: int) -> List[int]:
        self.kills.append(time.perf_counter())
        r = self.replicas[i]
        r.dead = True
        t = threading.Thread(target=r.close)
        t.start()
        self.closing.append(t)
        return [4242, 4243]

    def reap_one(self, i: int) -> float:
        for t in self.closing:
            t.join()
        return 0.0

    def start_one(self, i: int, timeout_s: float, poll_s: float = 0.01):
        t_cmd = time.perf_counter()
        old = self.replicas[i]
        cache = self.node if self.node is not None else set()  # a per-replica cache is lost
        self.replicas[i] = CacheReplica(cache, port=old.port, boot_s=self.boot_s)
        import urllib.request
        while time.perf_counter() - t_cmd < timeout_s:
            try:
                with urllib.request.urlopen(f"{self.replicas[i].url}/health", timeout=1) as r:
                    if r.status == 200:
                        return t_cmd, time.perf_counter()
            except OSError:
                pass
            time.sleep(poll_s)
        raise RuntimeError("not healthy")

    def close(self) -> None:
        for r in self.replicas:
            if not r.dead:
                r.close()


def fault_spec(**over: Any) -> Dict[str, Any]:
    return {"workload": FAULT_SPEC.__dict__, "seed": 3, "concurrency": 4,
            "request_timeout_s": 10.0, "start_timeout_s": 10.0, "block_size": BLOCK,
            "faults": {"kinds": ["restart", "kill"], "roles": ["kvstrata"], "kill_mode": "sticky",
                       "kill_after_s": 0.4, "window_s": 0.3, "keep_load": True,
                       "first_n": 4, "settle_s": 2.0, **over}}


@pytest.mark.parametrize("node_cache", [True, False])
def test_restart_time_to_first_hit(node_cache):
    fs = FakeSet(2, node_cache)
    try:
        runner = faults.FaultRunner(fs, fault_spec(), "kvstrata" if node_cache else "native",
                                    "m", lambda _m: None, uses_daemon=node_cache)
        res = runner.restart()
    finally:
        fs.close()
    n = res["numbers"]
    assert res["homes"] == {"R": 6, "others": 6} and res["pre"]["requests"] == 24
    assert res["to_health_s"] >= 0.2 and n["errors"] == 0
    recs = res["requests"]
    assert len(recs) == 12 and {r["replica"] for r in recs} == {1}   # all to the restarted one
    assert all(r["turn"] == 3 for r in recs) and all(r["start_s"] >= 0 for r in recs)
    assert n["first_cached_s"] is not None   # the document, from its own cache at least
    if node_cache:   # turns 1-2 of every conversation are in the node cache: the first hits
        assert n["first_hit_s"] is not None and n["first_hit_s"] < 0.5
        assert n["first_n_fractions"]["beyond_own_frac"] > 0.2   # 16 of 68 tokens
        assert n["by_home"]["others"]["beyond_own_frac"] > 0.2
        assert "PASS" in res["target"]
    else:            # cold: nothing beyond what it computed itself since the restart
        assert n["first_hit_s"] is None and n["all_fractions"]["beyond_own_frac"] == 0.0
        assert all(r["cached_tokens"] <= r["own_prefix"] for r in recs)
        assert "no target" in res["target"]
    text = "\n".join(faults.render_faults({"x:restart": res}))
    assert "first 4 requests: cached" in text


def test_kill_reroutes_counts_errors_and_follows_the_daemon():
    fs = FakeSet(2, node_cache=True)
    dead_at: List[float] = []

    def probe() -> Dict[str, Any]:  # the killed engine's sessions go 0.2 s after the kill
        gone = bool(fs.kills) and time.perf_counter() - fs.kills[0] > 0.2
        pids = [1] + ([] if gone else [4242])
        if gone and not dead_at:
            dead_at.append(time.perf_counter())
        return {"sessions": float(len(pids)), "active_leases": 0.0, "active_loads": 0.0,
                "active_reservations": 0.0, "kvstrata_fenced_bytes": 0.0 if gone else 512.0,
                "session_list": [{"pid": p, "client": "c", "registrations": 1, "leases": 1,
                                  "jobs": 0} for p in pids]}
    fs.replicas[1].delay_s = 0.2  # R's streams last: the kill finds them mid-stream
    try:
        runner = faults.FaultRunner(fs, fault_spec(), "kvstrata", "m", lambda _m: None,
                                    probe=probe, uses_daemon=True)
        res = runner.kill(restart_after=True)
        healthy_again = fs.replicas[1].dead is False
    finally:
        fs.close()
    assert res["kill_s"] is not None and res["kill_s"] >= 0.4
    assert res["kill_s"] >= res["first_turns_done_s"] + 0.3   # the window before: later turns
    assert res["windows"]["before"]["turn1"] == 0
    recs = res["requests"]
    on_r = [r for r in recs if r["replica"] == 1]
    assert on_r and all(r["start_s"] <= res["kill_s"] for r in on_r)   # nothing sent after
    assert res["in_flight_at_kill"], "killed with nothing in flight"
    e = res["errors"]
    # the requests in flight on R fail (one ending right at the kill may not)
    assert e["on_others"] == 0 and 1 <= e["on_killed"] <= len(res["in_flight_at_kill"])
    assert res["retried"] == e["on_killed"]               # every cut turn sent again
    done = {(r["conv"], r["turn"]) for r in recs if r["error"] is None}
    assert len(done) == FAULT_SPEC.conversations * FAULT_SPEC.turns   # nothing lost
    assert res["rehomed"] >= 1 and res["limit_after"] == 2
    w = res["windows"]
    assert w["before"]["n"] > 0 and w["after"]["n"] > 0 and w["p99_ratio"] is not None
    d = res["daemon"]
    assert d["before_kill"]["sessions"] == 1 and d["sessions_gone_after_s"] is not None
    assert 0.2 <= d["sessions_gone_after_s"] < 1.5 and d["fenced_zero_after_s"] is not None
    assert d["fenced_bytes_max"] in (0.0, 512.0)          # sampled every 0.25 s
    assert d["last"]["sessions"] == 1.0
    assert res["restart_to_health_s"] is not None and healthy_again
    text = "\n".join(faults.render_faults({"kvstrata:kill": res}))
    assert "SIGKILL to R=1 (2 processes)" in text and "kvstratad: R's sessions 1" in text


def test_kill_with_a_control_is_judged_against_the_control():
    """--fault-kill-control: the phase's workload runs once without the kill first, and the
    others' TTFT after the kill is judged against the control's in the same window."""
    fs = FakeSet(2, node_cache=True)
    fs.replicas[1].delay_s = 0.2
    many = 2 * FAULT_SPEC.conversations
    try:
        runner = faults.FaultRunner(fs, fault_spec(kill_control=True, kill_conversations=many),
                                    "kvstrata", "m", lambda _m: None, uses_daemon=True)
        res = runner.kill(restart_after=False)
    finally:
        fs.close()
    assert res["kill_s"] is not None
    c = res["control"]
    assert c["seed"] == "3-fault-kill-control" and c["wall_s"] > 0
    assert c["windows"]["after"]["n"] > 0 and c["p99_ratio"] is not None
    assert c["p99_ratio"] == round(res["windows"]["after"]["p99_ms"]
                                   / c["windows"]["after"]["p99_ms"], 3)
    assert "the control's in the same window" in res["target"]
    assert len({r["conv"] for r in res["requests"]}) == many   # --fault-kill-conversations
    text = "\n".join(faults.render_faults({"kvstrata:kill": res}))
    assert "control (no kill, seed 3-fault-kill-control" in text


class RunFakeSet(FakeSet):
    """FakeSet in replicas.ReplicaSet's place for run.py (a per-replica cache: native)."""

    def __init__(self, server, count, role, log_dir, env) -> None:
        super().__init__(count, node_cache=False, boot_s=0.05)

    def start(self, kv_transfer, timeout_s) -> float:
        return 0.1

    def stop(self) -> float:
        self.close()
        return 0.01

    def alive(self) -> List[bool]:
        return [not r.dead for r in self.replicas]


def test_run_py_runs_fault_phases_after_the_modes(tmp_path, monkeypatch):
    import run
    monkeypatch.setattr(run, "ReplicaSet", RunFakeSet)
    args = run.parse_args(["--out", str(tmp_path / "out"), "--faults", "restart,kill",
                           "--plan", "native:sticky", "--fault-kill-after-s", "0.4",
                           "--fault-window-s", "0.3", "--fault-settle-s", "1"])
    (tmp_path / "out").mkdir()
    spec = {"plan": [["native", ["sticky"]]], "replicas": 2, "smoke": False, "model": "m",
            "tokenizer": "t", "vocab": 1000, "dtype": "bfloat16", "block_size": BLOCK,
            "gpu_blocks": 100, "max_model_len": 1000, "max_num_seqs": 8,
            "gpu_memory_utilization": 0.5, "enforce_eager": True, "base_port": 8100,
            "serve_args": [], "workload": FAULT_SPEC.__dict__, "concurrency": 4, "seed": 1,
            "request_timeout_s": 10.0, "start_timeout_s": 10.0, "logprob_tol": 0.02,
            "cpu_bytes_per_replica": 1 << 30, "l1_bytes": 2 << 30, "daemon": {},
            "prompt_tokens_per_mode": FAULT_SPEC.prompt_tokens_total(),
            "distinct_tokens_per_mode": FAULT_SPEC.unique_tokens(),
            "faults": run.fault_spec(args)}
    state = {"spec": spec, "results": {}}
    r = run.Run(args, spec, tmp_path, state)
    r.run()
    assert list(state["results"]) == ["native:sticky"]
    assert sorted(state["results"]["native:sticky"]["gauges"]) == [0, 1]  # sampled per replica
    assert list(state["faults"]) == ["native:restart", "native:kill"]
    assert state["faults"]["native:restart"]["numbers"]["first_hit_s"] is None  # cold
    kill = state["faults"]["native:kill"]
    assert kill["kill_s"] is not None and "restart_to_health_s" not in kill  # the last phase
    assert r.left() == [] and set(state["timings"]) >= {"fault_restart", "fault_kill"}
    node = json.loads((tmp_path / "out" / "node.json").read_text())
    assert list(node["faults"]) == ["native:restart", "native:kill"]
    lines = "\n".join(run.render_faults(state["faults"]))
    assert "native:restart" in lines and "native:kill" in lines and "target others'" in lines
