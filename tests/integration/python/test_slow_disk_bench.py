"""bench/slow_disk's throttle and summary (no vLLM): rates, the disk under a directory, the
verdict; and, as root with a cgroup io (v2) or blkio (v1) controller, a real throttle that
dd reads through at the rate it was given (skipped otherwise)."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from bench_modules import load

summary = load("slow_disk", "summary")
throttle = load("slow_disk", "throttle")


def test_parse_rate():
    assert throttle.parse_rate("4MB") == 4_000_000
    assert throttle.parse_rate("512KB/s") == 512_000
    assert throttle.parse_rate("1.5GB") == 1_500_000_000
    assert throttle.parse_rate("0") == throttle.parse_rate("none") == 0


def test_disk_of_names_a_whole_disk(tmp_path):
    dev = throttle.disk_of(tmp_path)
    major, minor = (int(x) for x in dev.split(":"))
    sys_dev = Path("/sys/dev/block") / dev
    if sys_dev.exists():  # a block device (not tmpfs/overlay): never a partition
        assert not (sys_dev / "partition").exists()
    assert major >= 0 and minor >= 0


def _rec(ms, cached=0):
    return {"ttft_s": ms / 1e3, "prompt_tokens": 100, "cached_tokens": cached}


def test_summary_verdict_and_plan_counts():
    wave = {"recompute": [_rec(100), _rec(900)], "hit": [_rec(50, 96), _rec(1000, 96)],
            "metrics": {"vllm:kvstrata_plan_async": 1.0, "vllm:kvstrata_plan_recompute": 1.0}}
    result = {"args": {"concurrency": 2, "waves": 2, "prompt_tokens": 100},
              "rows": {"2MB": {"fio": {"MB_s": 2.0}, "dd": {"MB_s": 2.1},
                               "waves": [wave, wave]}}}
    f = summary.row_figures(result["rows"]["2MB"])
    assert f["hit"]["p99"] == 1000.0 and f["recompute"]["p99"] == 900.0
    assert f["plan"]["async"] == 2 and f["plan"]["recompute"] == 2
    text = summary.render(result)
    assert "MISS (1.11x)" in text and "| 2MB | 2.0 | 2.1 |" in text and "0/2/0/2" in text


def test_summary_own_recompute_reference():
    """The KVStrata replica's own recomputes (fresh prompts, nothing stored) are a second
    reference beside the target's `none` replica; a row without them prints no such line."""
    wave = {"recompute": [_rec(900)], "hit": [_rec(1000, 96)],
            "own_recompute": [_rec(1010), _rec(1020)]}
    result = {"args": {}, "rows": {"200MB": {"waves": [wave]}}}
    f = summary.row_figures(result["rows"]["200MB"])
    assert f["own"] == {"n": 2, "p50": 1010.0, "p90": 1020.0, "p99": 1020.0}
    text = summary.render(result)
    assert "own recompute" in text and "against it: PASS (0.98x)" in text
    assert "MISS (1.11x)" in text  # the target's verdict is against `none`, unchanged
    del wave["own_recompute"]
    assert "against it" not in summary.render(result)


@pytest.mark.skipif(throttle.available() is not None, reason=str(throttle.available()))
@pytest.mark.skipif(shutil.which("dd") is None, reason="no dd")
def test_throttle_holds_dd_to_its_rate(tmp_path):
    d = Path(os.environ.get("KVSTRATA_SLOW_DISK_DIR", "/var/tmp")) / f"kvs-throttle-test-{os.getpid()}"
    d.mkdir(parents=True, exist_ok=True)
    th = throttle.Throttle(f"kvs-throttle-test-{os.getpid()}", throttle.disk_of(d), 4_000_000)
    try:
        res = throttle.dd_read(th, d, 8 << 20, 1 << 20)
        if "error" in res and "Invalid argument" in res["error"]:
            pytest.skip(f"no O_DIRECT on {d}: {res['error']}")
        assert "error" not in res, res
        assert 2.5 <= res["MB_s"] <= 5.0, res  # 8 MiB at 4 MB/s: ~2.1 s
        assert th.pids() == []  # dd ran in the group and is gone
    finally:
        th.remove()
        shutil.rmtree(d, ignore_errors=True)
    assert not th.dir.exists()
