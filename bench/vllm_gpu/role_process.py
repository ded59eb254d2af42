"""The GPU serving benchmarks' driver (bench/vllm_gpu, bench/sglang_gpu): each engine role
run as a process group of its own (started, watched, killed whole, its JSON result read
back), one after the other beside the run's kvstratad."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Tuple

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


def run_benchmark(args, roles: Tuple[str, ...], make_spec: Callable[[Any, Path], Dict[str, Any]],
                  report: Callable[[Dict[str, Any], Dict[str, Any]], Dict[str, Any]],
                  render: Callable[[Dict[str, Any], Dict[str, Any], Dict[str, Any]], str],
                  json_name: str, engine: Path,
                  before_roles: Optional[Callable[[Dict[str, Any], Dict[str, Any], Path], None]]
                  = None, on_continue: Optional[Callable[[Dict[str, Any]], None]] = None,
                  before_role: Optional[Callable[[str, Dict[str, Any], Path], None]] = None) -> int:
    """The driver of a GPU serving benchmark (args: --out, --workdir, --roles, --continue,
    --keep-daemon, --role-timeout): a fresh workdir and spec (or, with --continue, the
    workdir's spec and the results of roles run before), the run's kvstratad (started unless
    one from an earlier call still runs), before_roles(spec, results, workdir), then each
    role in turn (before_role(role, spec, workdir) first, if given) with the report
    rewritten to OUT/json_name after each; OUT/summary.txt,
    run.log and kvstratad.log at the end. Blocks for the whole run."""
    from daemon_ctl import DaemonCtl  # noqa: PLC0415 - needs kvstrata; --help does not
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    workdir = Path(args.workdir)
    spec_path = workdir / "spec.json"
    results: Dict[str, Any] = {}
    if args.cont and spec_path.is_file():
        spec = json.loads(spec_path.read_text())
        if on_continue is not None:
            on_continue(spec)
        for f in sorted((workdir / "roles").glob("*.json")):
            if f.stem.split(".")[0] in roles or f.stem in ("disk", "ceiling"):
                results[f.stem] = json.loads(f.read_text())
    else:
        shutil.rmtree(workdir, ignore_errors=True)
        (workdir / "roles").mkdir(parents=True)
        spec = make_spec(args, workdir)
        spec_path.write_text(json.dumps(spec, indent=1))
    daemon = DaemonCtl(**spec["daemon"])
    rep: Dict[str, Any] = {}
    with open(out / "run.log", "w") as log:
        try:
            if before_roles is not None:
                before_roles(spec, results, workdir)
            if daemon.pid() is None:
                print(f"kvstratad started in {daemon.start():.1f} s", flush=True)
            for role in args.roles.split(","):
                if before_role is not None:
                    before_role(role, spec, workdir)
                results[role] = run_role(role, spec_path, workdir / "roles", log,
                                         args.role_timeout, engine=engine)
                rep = report(results, spec)
                (out / json_name).write_text(json.dumps(
                    {"spec": spec, "report": rep, "results": results}, indent=1))
        finally:
            if not args.keep_daemon:
                daemon.stop()
            shutil.copy(daemon.log_path, out / "kvstratad.log")
    text = render(rep, results, spec)
    (out / "summary.txt").write_text(text + "\n")
    print(text)
    return 0
