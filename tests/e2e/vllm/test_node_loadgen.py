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
