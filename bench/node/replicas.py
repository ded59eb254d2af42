"""The node's `vllm serve` replicas: one OpenAI-compatible server per GPU (replica i on
CUDA_VISIBLE_DEVICES=i, port base_port + i), each its own process group, started together
and stopped whole.

Started as `python3 -m vllm.entrypoints.openai.api_server` (the same arguments as `vllm
serve`): the carried vLLM of the GPU machine has no `vllm` script, and vLLM's CPU build's
script fails (docs/vllm-connector.md, Tests). Every replica gets PYTHONHASHSEED (one block
hash seed across the node: KVStrata's cross-instance hits need it).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

SERVED_NAME = "node-model"


@dataclass(frozen=True)
class ServerSpec:
    """What every replica of a run shares (a role adds its kv_transfer_config)."""
    python: str
    model: str
    tokenizer: str
    dtype: str
    block_size: int
    gpu_blocks: int
    max_model_len: int
    max_num_seqs: int
    gpu_memory_utilization: float
    enforce_eager: bool
    base_port: int
    cpu: bool  # vLLM's CPU build (the smoke run): no CUDA_VISIBLE_DEVICES, one core each
    extra_args: Tuple[str, ...] = ()  # --serve-args: more `vllm serve` arguments


def server_args(spec: ServerSpec, port: int, kv_transfer: Optional[Dict[str, Any]]) -> List[str]:
    args = [spec.python, "-m", "vllm.entrypoints.openai.api_server",
            "--model", spec.model, "--tokenizer", spec.tokenizer,
            "--served-model-name", SERVED_NAME, "--host", "127.0.0.1", "--port", str(port),
            "--load-format", "dummy", "--dtype", spec.dtype, "--seed", "0",
            "--block-size", str(spec.block_size),
            "--num-gpu-blocks-override", str(spec.gpu_blocks),
            "--max-model-len", str(spec.max_model_len),
            "--max-num-seqs", str(spec.max_num_seqs),
            "--gpu-memory-utilization", str(spec.gpu_memory_utilization),
            "--enable-prefix-caching", "--enable-prompt-tokens-details",
            "--no-enable-log-requests"]
    if spec.enforce_eager:
        args.append("--enforce-eager")
    if kv_transfer is not None:
        args += ["--kv-transfer-config", json.dumps(kv_transfer)]
    return args + list(spec.extra_args)


class Replica:
    def __init__(self, index: int, args: List[str], env: Dict[str, str], log_path: Path) -> None:
        self.index = index
        self.port = int(args[args.index("--port") + 1])
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.args, self.env = list(args), dict(env)
        self.spawn()

    def spawn(self) -> None:
        """Start the server process (again: faults.py's restarts), its own process group."""
        with open(self.log_path, "ab") as log:
            log.write(f"\n===== {' '.join(self.args)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=self.env,
                                         start_new_session=True)

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=2.0) as resp:
                return resp.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def kill(self) -> None:
        """SIGTERM to the whole process group, SIGKILL after 20 s."""
        for sig, wait_s in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(self.proc.pid, sig)
            except OSError:
                return
            try:
                self.proc.wait(timeout=wait_s)
            except subprocess.TimeoutExpired:
                continue
            try:  # the group may outlive its leader (engine core, workers)
                os.killpg(self.proc.pid, 0)
            except OSError:
                return

    def group_pids(self) -> List[int]:
        """The live processes of its process group (the server, vLLM's engine core, ...)."""
        return group_pids(self.proc.pid)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def group_pids(pgid: int) -> List[int]:
    """Pids of the live (not zombie) processes whose process group is pgid, from /proc."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and fields[0] not in ("Z", "X") and int(fields[2]) == pgid:
            out.append(int(d.name))
    return sorted(out)


class ReplicaSet:
    """`count` replicas of one role, started at once; `start` waits until all answer
    /health (RuntimeError with the failing replica's log tail if one exits or the timeout
    passes; everything started is stopped then)."""

    def __init__(self, spec: ServerSpec, count: int, role: str, log_dir: Path,
                 env: Dict[str, str]) -> None:
        self.spec, self.count, self.role = spec, count, role
        self.log_dir, self.env = log_dir, env
        self.replicas: List[Replica] = []

    @property
    def urls(self) -> List[str]:
        return [r.url for r in self.replicas]

    def start(self, kv_transfer: List[Optional[Dict[str, Any]]], timeout_s: float) -> float:
        t0 = time.monotonic()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        for i in range(self.count):
            env = dict(self.env, PYTHONHASHSEED="0")
            if self.spec.cpu:
                env["VLLM_CPU_OMP_THREADS_BIND"] = str(i % max(1, os.cpu_count() or 1))
            else:
                env["CUDA_VISIBLE_DEVICES"] = str(i)
            args = server_args(self.spec, self.spec.base_port + i, kv_transfer[i])
            self.replicas.append(Replica(i, args, env,
                                         self.log_dir / f"{self.role}.replica{i}.log"))
        try:
            waiting = list(self.replicas)
            while waiting:
                for r in list(waiting):
                    if r.proc.poll() is not None:
                        raise RuntimeError(f"{self.role} replica {r.index} exited with "
                                           f"{r.proc.returncode}:\n{r.log_tail()}")
                    if r.healthy():
                        waiting.remove(r)
                if time.monotonic() - t0 > timeout_s:
                    raise RuntimeError(f"{self.role} replica {waiting[0].index} not healthy "
                                       f"after {timeout_s:.0f} s:\n{waiting[0].log_tail()}")
                time.sleep(0.5)
        except BaseException:
            self.stop()
            raise
        return time.monotonic() - t0

    # ---------------------------------------------------------- one replica (faults.py)

    def stop_one(self, i: int) -> float:
        """Replica i stopped as `stop` stops them all (SIGTERM to its group, SIGKILL after
        20 s), until no process of its group is left; seconds."""
        t0 = time.monotonic()
        r = self.replicas[i]
        r.kill()
        self.reap_one(i)
        return time.monotonic() - t0

    def kill_one(self, i: int) -> List[int]:
        """SIGKILL to replica i's whole process group (the server and vLLM's engine core
        child), without waiting; the pids it held."""
        r = self.replicas[i]
        pids = r.group_pids()
        try:
            os.killpg(r.proc.pid, signal.SIGKILL)
        except OSError:
            pass
        return pids

    def reap_one(self, i: int, timeout_s: float = 30.0) -> float:
        """Until replica i's server has exited and its group has no live process; seconds."""
        t0 = time.monotonic()
        r = self.replicas[i]
        try:
            r.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            pass
        while r.group_pids() and time.monotonic() - t0 < timeout_s:
            time.sleep(0.05)
        return time.monotonic() - t0

    def start_one(self, i: int, timeout_s: float, poll_s: float = 0.1) -> Tuple[float, float]:
        """Replica i started again with the same arguments, environment, port and log;
        (perf_counter at the start command, perf_counter when /health answered OK).
        RuntimeError if it exits or is not healthy within timeout_s."""
        r = self.replicas[i]
        t_cmd = time.perf_counter()
        r.spawn()
        while True:
            if r.healthy():
                return t_cmd, time.perf_counter()
            if r.proc.poll() is not None:
                raise RuntimeError(f"{self.role} replica {i} exited with {r.proc.returncode} "
                                   f"on its restart:\n{r.log_tail()}")
            if time.perf_counter() - t_cmd > timeout_s:
                raise RuntimeError(f"{self.role} replica {i} not healthy {timeout_s:.0f} s "
                                   f"after its restart:\n{r.log_tail()}")
            time.sleep(poll_s)

    def alive(self) -> List[bool]:
        return [r.proc.poll() is None for r in self.replicas]

    def stop(self) -> float:
        t0 = time.monotonic()
        for r in self.replicas:
            try:
                os.killpg(r.proc.pid, signal.SIGTERM)
            except OSError:
                pass
        for r in self.replicas:
            r.kill()
        self.replicas = []
        return time.monotonic() - t0
