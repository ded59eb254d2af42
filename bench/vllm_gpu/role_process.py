"""An engine role of the GPU serving benchmarks (bench/vllm_gpu, bench/sglang_gpu) run as a
process group of its own: started, watched, killed whole, and its JSON result read back."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, Optional

HERE = Path(__file__).resolve().parent


def run_role(role: str, spec_path: Path, out_dir: Path, log, timeout_s: float,
             engine: Path = HERE / "engine.py") -> Dict[str, Any]:
    """`engine` --role ROLE in its own process group (killed whole afterwards, so no
    engine-core or scheduler process keeps the GPU); its parsed result (possibly partial).
    Blocks until the role ends or its timeout; echoes its event lines and errors."""
    result = out_dir / f"{role}.json"
    cmd = [sys.executable, str(engine), "--role", role, "--spec", str(spec_path),
           "--out", str(result)]
    t0 = time.monotonic()
    log.write(f"\n===== {role}: {' '.join(cmd)}\n")
    log.flush()
    # One PYTHONHASHSEED for every engine, as in any deployment whose instances share
    # kvstratad: vLLM 0.26 seeds its block hashes (the connector's keys) at random otherwise.
    env = dict(os.environ, PYTHONHASHSEED=os.environ.get("PYTHONHASHSEED", "0"))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True, text=True, bufsize=1)

    def kill_group() -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass

    watchdog = threading.Timer(timeout_s, kill_group)
    watchdog.start()
    rc: Optional[int] = None
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(line)
            if line.startswith(("[engine ", "{\"what\"")) or "Error" in line or "Traceback" in line:
                print(line, end="", flush=True)
        rc = proc.wait()
        if time.monotonic() - t0 >= timeout_s:
            print(f"{role}: stopped at its {timeout_s:.0f} s limit", flush=True)
    finally:
        watchdog.cancel()
        kill_group()
        proc.wait()
    wait_gpu_free()
    data: Dict[str, Any] = {}
    if result.is_file():
        data = json.loads(result.read_text())
    data["rc"] = rc
    data["seconds"] = round(time.monotonic() - t0, 1)
    print(f"== {role}: rc={rc} in {data['seconds']} s", flush=True)
    return data


def wait_gpu_free(timeout_s: float = 30.0) -> None:
    """Until no process holds GPU memory (the last engine's processes are gone)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        try:
            out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            return
        if not out:
            return
        time.sleep(0.5)
