"""bench/node/gauges.py: the gauges parsed from a Prometheus page, the sampler against real
HTTP servers on loopback (one answering, one gone), and the per-replica summary lines that
show which replica fell behind."""
from __future__ import annotations

import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench" / "node"))

import gauges  # noqa: E402

PAGE = """# HELP vllm:num_requests_running running
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_waiting{engine="0",model_name="m"} 2.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.75
vllm:kvstrata_plan_in_step_total{engine="0"} 10.0
vllm:kvstrata_plan_async_total{engine="0"} 4.0
vllm:kvstrata_plan_async_total{engine="1"} 1.0
vllm:num_preemptions_total{engine="0"} 2.0
vllm:kvstrata_store_units_planned_total{engine="0"} 40.0
vllm:kvstrata_stored_units_total{engine="0"} 30.0
vllm:kvstrata_store_dropped_units_total{engine="0"} 3.0
vllm:kvstrata_store_failed_units_total{engine="0"} 1.0
vllm:num_requests_running_created 1.7e9
not a sample line
"""


def test_read_gauges_sums_label_sets_and_defaults_to_zero():
    row = gauges.read_gauges(PAGE)
    assert row == [3.0, 2.0, 0.75, 10.0, 5.0, 2.0, 40.0, 30.0, 3.0, 1.0]
    assert gauges.store_backlog([0.0] + row) == 6.0
    assert gauges.read_gauges("vllm:num_requests_waiting 7\n") == [0.0, 7.0] + [0.0] * 8
    assert gauges.read_gauges("") == [0.0] * 10


class Replica:
    """/metrics whose waiting gauge counts the scrapes so far."""

    def __init__(self) -> None:
        self.scrapes = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                owner.scrapes += 1
                body = (f"vllm:num_requests_running 1\nvllm:num_requests_waiting "
                        f"{owner.scrapes}\nvllm:kv_cache_usage_perc 0.5\n").encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_sampler_keeps_rows_per_replica_and_skips_a_replica_that_does_not_answer():
    rep = Replica()
    try:
        with gauges.Sampler([rep.url, "http://127.0.0.1:9"], period_s=0.05,
                            timeout_s=0.5) as s:
            time.sleep(0.4)
        rows = s.series[0]
        assert len(rows) >= 3
        assert [r[2] for r in rows] == list(range(1, len(rows) + 1))   # every scrape, in order
        assert all(r[1] == 1.0 and r[3] == 0.5 for r in rows)
        assert [r[0] for r in rows] == sorted(r[0] for r in rows)
        assert s.series[1] == []                                       # nothing listens on :9
        seen = rep.scrapes
        time.sleep(0.15)
        assert rep.scrapes == seen                                     # stopped at __exit__
    finally:
        rep.close()


def test_replica_lines_show_the_replica_that_fell_behind():
    def req(replica, turn, ttft, end):
        return {"replica": replica, "turn": turn, "ttft_s": ttft, "end_s": end}
    results = {
        "kvstrata:rr": {
            "requests": [req(0, 1, 0.9, 1.0), req(0, 2, 0.1, 2.0), req(0, 3, 0.12, 3.0),
                         req(1, 2, 1.5, 4.0), req(1, 3, 2.2, 6.5)],
            # replica 0's rows have the columns of the first gauges.py (no store counters)
            "gauges": {0: [[0.0, 4, 0, 0.5, 0, 0], [0.5, 4, 0, 0.7, 1, 0]],
                       1: [[0.0, 8, 3, 0.96, 0, 0, 1, 10, 10, 0, 0],
                           [0.5, 9, 5, 1.0, 2, 1, 2, 60, 20, 5, 0],
                           [1.0, 9, 0, 0.9, 2, 1, 4, 80, 70, 0, 0]]},
        },
        "native:rr": {"requests": [], "gauges": {0: [], 1: []}},   # no samples: no lines
    }
    lines = gauges.replica_lines(results)
    text = "\n".join(lines)
    assert "native:rr" not in text
    assert "replica 0: TTFT t>=2 p90 120 ms, last end 3.0 s; running max 4, waiting max 0 " \
           "(0.0 s with some waiting), GPU KV used 60% on average, 0 preempted, store backlog max 0 " \
           "units" in text
    assert "replica 1: TTFT t>=2 p90 2200 ms, last end 6.5 s; running max 9, waiting max 5 " \
           "(1.0 s with some waiting), GPU KV used 95% on average, 3 preempted, store backlog max 35 " \
           "units" in text
    assert gauges.replica_lines({"x:rr": {"requests": []}}) == []
