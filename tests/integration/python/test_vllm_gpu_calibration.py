"""bench/vllm_gpu: the CPU calibration each engine process takes after its start
(cpu_probe.calibrate) and summary.txt's lines that flag an engine on a slow core
(report.calibration_lines), as gpt-oss run 3's engine A was."""
from __future__ import annotations

from bench_modules import load

cpu_probe = load("vllm_gpu", "cpu_probe")
report = load("vllm_gpu", "report")


def test_calibrate_times_the_loop_on_this_thread():
    c = cpu_probe.calibrate(loops=20_000, reps=3)
    assert 0 < c["cpu_ms"] <= c["wall_ms"] + 1.0
    assert c["cpu"] is None or c["cpu"] >= 0
    assert c["loadavg"] >= 0


def test_calibration_lines_flag_the_engine_on_a_slow_core():
    calib = {"native": {"cpu_ms": 10.0, "cpu": 3}, "kvstrata": {"cpu_ms": 24.0, "cpu": 7},
             "kvstrata_b": {"cpu_ms": 11.0, "cpu": 9}, "none": None}
    lines = report.calibration_lines(calib)
    assert lines[0].endswith("native 10.0 ms on CPU 3, kvstrata 24.0 ms on CPU 7, "
                             "kvstrata_b 11.0 ms on CPU 9")
    assert len(lines) == 2 and lines[1].startswith("  SLOW CORE: kvstrata's process")
    assert "2.18x the median (11.0 ms)" in lines[1]
    assert report.calibration_lines({"native": None}) == []
    assert len(report.calibration_lines({"a": {"cpu_ms": 10.0}, "b": {"cpu_ms": 12.0}})) == 1
