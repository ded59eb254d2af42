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
        with open(log_path, "ab") as log:
            log.write(f"\n===== {' '.join(args)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=env,
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

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


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
