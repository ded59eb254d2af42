"""The load planner's decisions reach the daemon: vLLM's real Scheduler (CPU) with the
connector's planner on, against a real kvstratad. The scheduler's session sends its plan_*
(and load_gave_up*) totals with its heartbeats; Admin.GetStats and the real `kvstrata stats` show them, also
after the session closed (docs/load-planner.md, "Seeing it")."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Dict

import kvstrata
from test_scheduler import (PROMPT, ext, in_step_hit_with_the_planner, run_and_verify, slow_compute,
                            warm)

REPO = Path(__file__).resolve().parents[3]


def client_counters(daemon) -> Dict[str, int]:
    with kvstrata.Client(daemon.endpoint, timeout=10.0) as c:
        return {x.name: x.value for x in c.get_stats().client_counters}


def cli_stats(daemon) -> str:
    binary = os.environ.get("KVSTRATA_CLI") or str(REPO / "build" / "client" / "cli" / "kvstrata")
    out = subprocess.run([binary, f"--endpoint={daemon.endpoint}", "stats"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_a_planner_decision_reaches_the_daemons_stats(model_dir, daemon, engines):
    warm(engines, model_dir, daemon)      # planner auto: off on a CPU engine, reports nothing
    assert client_counters(daemon) == {}
    e = in_step_hit_with_the_planner(engines, model_dir, daemon)
    sched = e.connector.scheduler
    sched.link.session().heartbeat()      # the heartbeat thread's next beat, now
    assert client_counters(daemon) == {"plan_in_step": 1, "plan_async": 0, "plan_partial": 0,
                                       "plan_recompute": 0, "plan_unloaded_tokens": 0,
                                       "load_gave_up": 0, "load_gave_up_tokens": 0}
    # A second engine's planner recomputes (its compute is faster than any load); its
    # session closes without a heartbeat in between: the close sends the last counts.
    e2 = engines(model_dir, ext(daemon, load_mode="sync", load_planner="on"))
    slow_compute(e2, ms_per_token=1e-6)
    r2 = e2.add(PROMPT)
    run_and_verify(e2, r2.request_id)
    assert e2.stats.get("plan_recompute") == 1, e2.stats
    e2.connector.scheduler.link.close()
    sched.link.close()
    counters = client_counters(daemon)
    assert counters["plan_in_step"] == 1 and counters["plan_recompute"] == 1, counters
    assert counters["plan_unloaded_tokens"] == e2.stats["plan_unloaded_tokens"] > 0
    text = cli_stats(daemon).split("Load planner", 1)[1]
    rows = {line.split()[0]: line.split()[1] for line in text.splitlines()
            if line.split()[:1] and line.split()[0] in ("in_step", "async", "recompute")}
    assert rows == {"in_step": "1", "async": "0", "recompute": "1"}, text
    assert f"tokens left to compute: {counters['plan_unloaded_tokens']}" in text
