"""bench/gpu/node_loads.py without a GPU: its argument and device-list parsing, the step
plan, the summary and table from fake records, the exit status where torch or CUDA is
missing, and the processes' barrier protocol run with a fake engine (spawned processes, no
torch, no daemon)."""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, Optional

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench" / "gpu"))

import node_loads  # noqa: E402
from node_loads_report import (Step, format_summary, l1_capacity, make_plan,  # noqa: E402
                               parse_devices, parse_sizes, summarize)

MIB2 = 2 << 20


def test_parse_devices():
    assert parse_devices(None, 4) == [0, 1, 2, 3]
    assert parse_devices("all", 2) == [0, 1]
    assert parse_devices("2,0", 4) == [2, 0]
    with pytest.raises(ValueError, match="no CUDA device"):
        parse_devices("all", 0)
    with pytest.raises(ValueError, match=r"no CUDA device \[4\].*has 4: 0..3"):
        parse_devices("1,4", 4)
    with pytest.raises(ValueError, match="named twice"):
        parse_devices("1,1", 4)
    with pytest.raises(ValueError, match="expected 'all'"):
        parse_devices("gpu0", 4)


def test_parse_sizes_and_l1():
    assert parse_sizes("8192,32768") == [512, 2048]
    with pytest.raises(ValueError, match=r"\[100\] not a positive multiple of 16"):
        parse_sizes("8192,100")
    with pytest.raises(ValueError, match="expected token counts"):
        parse_sizes("8k")
    assert l1_capacity(4, 2048, MIB2) == "21GiB"      # 16 GiB x 1.25 + 1
    assert l1_capacity(1, 512, MIB2) == "3GiB"        # 1.25 + 1 -> 3


def test_plan_one_device_has_only_alone_steps():
    plan = make_plan([0], [512, 2048], repeats=3, warmup=1)
    assert plan[0] == Step("ceil_alone", (0,))
    assert {s.phase for s in plan} == {"ceil_alone", "load_alone"}
    assert len(plan) == 1 + 2 * 4
    assert [s.rep for s in plan[1:5]] == [-1, 0, 1, 2]
    assert sum(s.timed_load for s in plan) == 6


def test_plan_several_devices():
    plan = make_plan([0, 1, 2], [512], repeats=2, warmup=1)
    phases = [s.phase for s in plan]
    assert phases[:4] == ["ceil_alone"] * 3 + ["ceil_all"]
    assert [s.devices for s in plan[:4]] == [(0,), (1,), (2,), (0, 1, 2)]
    alone = [s for s in plan if s.phase == "load_alone"]
    assert [s.devices[0] for s in alone] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert [s.rep for s in plan if s.phase == "load_all"] == [-1, 0, 1]
    assert phases.index("load_all") > max(i for i, p in enumerate(phases) if p == "load_alone")


def test_arguments():
    args = node_loads.build_parser().parse_args([])
    assert (args.devices, args.sizes, args.repeats, args.warmup, args.target) == \
        ("all", "8192,32768", 10, 1, 0.85)
    assert node_loads.check_args(args) == [512, 2048]
    for bad in (["--repeats", "0"], ["--target", "85"], ["--set", "gpu.copy_streams"],
                ["--sizes", "1000"]):
        with pytest.raises(ValueError):
            node_loads.check_args(node_loads.build_parser().parse_args(bad))


def _records(ceil_alone: float, ceil_all: float, job_alone: float, job_all: float,
             t0: float, wrong: int = 0) -> list:
    recs = [{"phase": "ceil_alone", "gbps": ceil_alone}, {"phase": "ceil_all", "gbps": ceil_all}]
    for rep in range(3):
        recs.append({"phase": "load_alone", "blocks": 512, "rep": rep, "start": 0.0,
                     "end": job_alone, "submit_s": 1e-4, "job_s": job_alone})
        recs.append({"phase": "load_all", "blocks": 512, "rep": rep, "start": t0 + rep,
                     "end": t0 + rep + job_all, "submit_s": 2e-4, "job_s": job_all})
    recs += [{"phase": p, "blocks": 512, "checked_bytes": 512 * MIB2, "wrong_bytes": wrong}
             for p in ("load_alone", "load_all")]
    return recs


def _fake_run(wrong: int = 0) -> Dict[str, Any]:
    nbytes = 512 * MIB2  # 1.07 GB: 20 ms is 53.7 GB/s
    workers = {0: {"gpu": "NVIDIA H100 80GB HBM3", "records": _records(55.0, 50.0, 0.020, 0.022, 100.0)},
               1: {"gpu": "NVIDIA H100 80GB HBM3",
                   "records": _records(55.0, 50.0, 0.020, 0.030, 100.001, wrong)}}
    windows = [{"phase": "load_all", "blocks": 512, "rep": r, "wall_s": 0.031, "cpu_s": 0.0155}
               for r in range(3)]
    windows += [{"phase": "load_alone", "blocks": 512, "rep": r, "wall_s": 0.021, "cpu_s": 0.0021}
                for r in range(6)]
    summary = summarize([0, 1], [512], MIB2, workers, windows, 0.85)
    return {"summary": summary, "daemon_cpu_run": {"cpu_s": 1.5, "wall_s": 30.0}, "error": None,
            "nbytes": nbytes}


def test_summary_figures_and_verdicts():
    r = _fake_run()
    s = r["summary"]
    d0, d1 = s["devices"]
    row0, row1 = d0["sizes"][0], d1["sizes"][0]
    assert row0["alone"]["gbps"] == pytest.approx(r["nbytes"] / 0.020 / 1e9)
    assert row0["all"]["gbps"] == pytest.approx(r["nbytes"] / 0.022 / 1e9)          # 48.8
    assert row0["all_pct_ceiling_all"] == pytest.approx(100 * 48.80 / 50.0, abs=0.1)
    assert row0["all_pct_ceiling_alone"] == pytest.approx(100 * 48.80 / 55.0, abs=0.1)
    assert row0["check"] is True                       # 97.6% of its all-at-once ceiling
    assert row1["all_pct_ceiling_all"] == pytest.approx(100 * 35.79 / 50.0, abs=0.1)
    assert row1["check"] is False                      # 71.6%
    assert row0["all"]["submit_us_p50"] == pytest.approx(200.0)
    assert not s["pass"]
    assert s["ceiling_alone_sum_gbps"] == 110.0 and s["ceiling_all_sum_gbps"] == 100.0
    (agg,) = s["aggregate"]                            # span: first start to last end, 31 ms
    assert agg["span_ms_p50"] == pytest.approx(31.0, abs=1e-6)
    assert agg["gbps"] == pytest.approx(2 * r["nbytes"] / 0.031 / 1e9)
    cpu = {c["phase"]: c for c in s["daemon_cpu"]}
    assert cpu["load_all"]["cores"] == pytest.approx(0.5)
    assert cpu["load_all"]["cpu_ms_per_gb"] == pytest.approx(46.5 / (3 * 2 * r["nbytes"] / 1e9))
    assert cpu["load_alone"]["cores"] == pytest.approx(0.1)
    assert s["checked_bytes"] == 4 * 512 * MIB2 and s["wrong_bytes"] == 0
    table = format_summary(r)
    assert "PASS" in table and "FAIL" in table and table.endswith("RESULT: FAIL")
    assert "0.50 cores" in table and "ceilings summed: 110.0 GB/s" in table


def test_summary_one_device_and_wrong_bytes():
    recs = [r for r in _records(55.0, 0, 0.0205, 0, 0) if "all" not in r["phase"]]
    s = summarize([0], [512], MIB2, {0: {"gpu": "H200", "records": recs}}, [], 0.85)
    row = s["devices"][0]["sizes"][0]
    assert row["all"] is None and row["all_pct_ceiling_all"] is None
    assert row["alone_pct_ceiling_alone"] == pytest.approx(100 * 52.37 / 55.0, abs=0.1)
    assert row["check"] is True and s["pass"] and s["aggregate"] == []
    assert format_summary({"summary": s}).endswith("RESULT: PASS")
    bad = _fake_run(wrong=7)["summary"]
    assert bad["wrong_bytes"] == 2 * 7 and not bad["pass"]  # Two checked loads of device 1.


def test_summary_reports_a_failed_device():
    s = summarize([0, 1], [512], MIB2, {0: {"error": "RuntimeError: boom", "records": []}}, [], 0.85)
    assert s["errors"] == {"0": "RuntimeError: boom", "1": "no result from its process"}
    assert not s["pass"]
    table = format_summary({"summary": s, "error": "an engine process failed"})
    assert "device 0: ERROR RuntimeError: boom" in table and table.endswith("RESULT: FAIL")


def test_main_without_torch_or_gpu_exits_2(capsys, tmp_path):
    try:
        import torch  # noqa: F401
        has_gpu = torch.cuda.is_available()
    except ImportError:
        has_gpu = False
    if has_gpu:
        pytest.skip("a CUDA device is present")
    assert node_loads.main(["--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "node_loads: " in err and ("torch is not importable" in err or "no CUDA device" in err)
    assert node_loads.main(["--sizes", "10"]) == 2


# ---------------------------------------------------------------------- the protocol


class FakeEngine:
    """node_loads.GpuEngine's interface without torch: loads sleep 2 ms; cfg["fail"] =
    (device, phase) raises there."""

    def __init__(self, device: int, cfg: Dict[str, Any]) -> None:
        self.device, self.cfg = device, cfg

    def setup(self) -> Dict[str, Any]:
        return {"gpu": f"fake{self.device}"}

    def prepare(self, step: Step) -> None:
        pass

    def timed(self, step: Step, sync: Callable[[], Any]) -> Optional[Dict[str, Any]]:
        if self.cfg.get("fail") == (self.device, step.phase):
            raise RuntimeError(f"fake failure in {step.phase}")
        if step.phase == "ceil_all":
            for _ in range(6):
                sync()
        if step.phase.startswith("ceil"):
            return {"phase": step.phase, "gbps": 50.0 + self.device}
        t0 = time.monotonic()
        time.sleep(0.002)
        t1 = time.monotonic()
        return None if step.rep < 0 else {"phase": step.phase, "blocks": step.blocks, "rep": step.rep,
                                          "start": t0, "end": t1, "submit_s": 1e-4, "job_s": t1 - t0}

    def check(self, step: Step) -> Optional[Dict[str, Any]]:
        if step.phase.startswith("load") and step.rep == 0:
            return {"phase": step.phase, "blocks": step.blocks, "checked_bytes": 100, "wrong_bytes": 0}
        return None

    def close(self) -> None:
        pass


CFG = {"endpoint": "unused", "n_max": 2, "salt": "t", "step_timeout": 30.0, "setup_timeout": 60.0}


def test_protocol_with_fake_engines():
    plan = make_plan([0, 1], [2], repeats=2, warmup=1)
    run = node_loads.run_node([0, 1], plan, CFG, os.getpid(), make_engine=FakeEngine)
    assert run["error"] is None
    assert sorted(run["workers"]) == [0, 1]
    assert all("error" not in w for w in run["workers"].values())
    assert len(run["windows"]) == sum(s.timed_load for s in plan) == 2 * 2 + 2
    s = summarize([0, 1], [2], MIB2, run["workers"], run["windows"], 0.85)
    assert [d["ceiling_all_gbps"] for d in s["devices"]] == [50.0, 51.0]
    assert s["checked_bytes"] == 2 * 2 * 100 and s["aggregate"][0]["repeats"] == 2
    assert {c["phase"] for c in s["daemon_cpu"] if "cores" in c} == {"load_alone", "load_all"}


def test_protocol_stops_when_an_engine_fails():
    plan = make_plan([0, 1], [2], repeats=2, warmup=0)
    cfg = {**CFG, "fail": (1, "load_alone")}
    t0 = time.monotonic()
    run = node_loads.run_node([0, 1], plan, cfg, None, make_engine=FakeEngine)
    assert time.monotonic() - t0 < 25  # Broken barriers, not a step timeout.
    assert run["error"] and run["windows"] == []
    assert run["workers"][1]["error"] == "RuntimeError: fake failure in load_alone"
    assert "barrier broken" in run["workers"][0]["error"]
