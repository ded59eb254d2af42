"""LMCache role for bench/node: one LMCache multiprocess ("MP") server per node, every vLLM
replica attached to it through LMCache's own vLLM connector.

What runs (LMCache 0.5.3, carried by scripts/lmcache_carry/prepare.sh; findings and evidence
in bench/node/LMCACHE.md):
  server   python3 -m lmcache.v1.multiprocess.http_server   (what `lmcache server` runs:
           ZMQ on 127.0.0.1:LMCACHE_PORT for the connectors, HTTP /healthcheck on
           127.0.0.1:LMCACHE_HTTP_PORT; all GPUs visible so it can open every replica's
           CUDA IPC handles, which it maps by device UUID)
  replica  --kv-transfer-config {"kv_connector": "LMCacheMPConnector",
           "kv_connector_module_path": "lmcache.integration.vllm.lmcache_mp_connector", ...}
           The module path matters: vLLM 0.26's in-tree LMCacheMPConnector calls the older
           adapter API (ParallelStrategy with 7 fields, server_url=) and fails against 0.5.3
           with "ParallelStrategy.__init__() takes 7 positional arguments but 8 were given".

Knobs, read from the env given to start_server, then from os.environ:
  LMCACHE_L1_SIZE_GB   the server's CPU (pinned DRAM) cache for the whole node, GB (default 32)
  LMCACHE_CHUNK_SIZE   tokens per LMCache chunk (default 256, LMCache's; a multiple of the
                       vLLM block size; only whole chunks are stored)
  LMCACHE_MAX_WORKERS  server worker threads per pool (default 2: one per replica)
  LMCACHE_PORT / LMCACHE_HTTP_PORT  (default 6555 / 6580)
  LMCACHE_SERVER_ARGS  extra server arguments (e.g. "--disable-observability")
  LMCACHE_START_TIMEOUT_S  seconds to wait for /healthcheck (default 300)
  LMCACHE_SERVER_CUDA_VISIBLE_DEVICES  GPUs the server sees (default: all; the env's own
                       CUDA_VISIBLE_DEVICES is dropped for the server)
  LMCACHE_SITE (default /tmp/lmcache_site), LMCACHE_CARRY_DIR (default <repo>/.lmcachecarry)

The carried site is unpacked on first use (start_server, extra_pythonpath) from
LMCACHE_CARRY_DIR/p*/site.part.* or /tmp/lmc_parts/site.part.* (+ site.sha256).
"""
from __future__ import annotations

import hashlib
import json
import os
import pathlib
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
import urllib.request
from importlib import metadata
from typing import Dict, List, Optional, Tuple

LMCACHE_VERSION = "0.5.3"
TORCH_MINOR = "2.11"  # what LMCache 0.5.3's C++/CUDA extensions were built against
CONNECTOR = "LMCacheMPConnector"
CONNECTOR_MODULE = "lmcache.integration.vllm.lmcache_mp_connector"
SERVER_MODULE = "lmcache.v1.multiprocess.http_server"

_REPO = pathlib.Path(__file__).resolve().parents[2]
SITE = pathlib.Path(os.environ.get("LMCACHE_SITE", "/tmp/lmcache_site"))
CARRY = pathlib.Path(os.environ.get("LMCACHE_CARRY_DIR", str(_REPO / ".lmcachecarry")))
PARTS_TMP = pathlib.Path("/tmp/lmc_parts")  # parts copied there by earlier calls (stage.sh)
_STAMP = SITE / f".lmcache-{LMCACHE_VERSION}-staged"

_DEFAULTS = {"LMCACHE_L1_SIZE_GB": "32", "LMCACHE_CHUNK_SIZE": "256",
             "LMCACHE_MAX_WORKERS": "2", "LMCACHE_PORT": "6555", "LMCACHE_HTTP_PORT": "6580",
             "LMCACHE_SERVER_ARGS": "", "LMCACHE_START_TIMEOUT_S": "300"}
_server_port: Optional[int] = None  # the port start_server used, for kv_transfer_config


def _knob(name: str, env: Optional[Dict[str, str]] = None) -> str:
    if env is not None and env.get(name):
        return env[name]
    return os.environ.get(name) or _DEFAULTS[name]


def _parts() -> Tuple[List[pathlib.Path], Optional[pathlib.Path]]:
    """The carried parts (sorted by index) and the checksum file, wherever they are."""
    for root, pattern in ((CARRY, "p*/"), (PARTS_TMP, "")):
        sha = sorted(root.glob(pattern + "site.sha256")) if root.is_dir() else []
        if sha:
            parts = sorted(root.glob(pattern + "site.part.*"), key=lambda p: int(p.suffix[1:]))
            return parts, sha[0]
    return [], None


def _staged() -> bool:
    return _STAMP.is_file() and (SITE / "lmcache" / "__init__.py").is_file()


def _stage() -> None:
    """Joins the parts, checks the sha256 and unpacks the site (once per machine)."""
    if _staged():
        return
    parts, sha_file = _parts()
    if not parts or sha_file is None:
        raise RuntimeError(f"LMCache carry not found under {CARRY} or {PARTS_TMP}: run "
                           "scripts/lmcache_carry/prepare.sh and carry .lmcachecarry/p1")
    want = sha_file.read_text().split()[0]
    joined = SITE.parent / (SITE.name + ".tar.xz")
    h = hashlib.sha256()
    with open(joined, "wb") as out:
        for p in parts:
            with open(p, "rb") as f:
                while chunk := f.read(1 << 22):
                    h.update(chunk)
                    out.write(chunk)
    if h.hexdigest() != want:
        joined.unlink(missing_ok=True)
        raise RuntimeError(f"LMCache carry checksum mismatch ({len(parts)} parts): "
                           f"{h.hexdigest()} != {want}")
    tmp = SITE.parent / (SITE.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    with tarfile.open(joined, "r:xz") as tar:
        tar.extractall(tmp, filter="tar") if sys.version_info >= (3, 12) else tar.extractall(tmp)
    joined.unlink(missing_ok=True)
    shutil.rmtree(SITE, ignore_errors=True)
    tmp.rename(SITE)
    (SITE / _STAMP.name).write_text(want + "\n")


def _check() -> str:
    """Why the role cannot run in this interpreter ("" when it can)."""
    if sys.version_info[:2] != (3, 12):
        return (f"LMCache {LMCACHE_VERSION} is carried as cp312 wheels; this is Python "
                f"{sys.version_info[0]}.{sys.version_info[1]} (the GPU image's python3 is 3.12)")
    try:
        torch_version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        return "torch is not installed in this interpreter"
    if not torch_version.startswith(TORCH_MINOR + "."):
        return (f"LMCache {LMCACHE_VERSION}'s extensions (lmcache/c_ops.*.so) were built against "
                f"torch {TORCH_MINOR}.0; this interpreter has torch {torch_version}")
    if not _staged() and not _parts()[0]:
        return (f"LMCache carry not found: no {SITE} and no site.part.* under {CARRY}/p*/ or "
                f"{PARTS_TMP} (run scripts/lmcache_carry/prepare.sh, carry .lmcachecarry/p1)")
    return ""


BLOCKED_REASON: str = _check()
AVAILABLE: bool = BLOCKED_REASON == ""


def _require() -> None:
    if not AVAILABLE:
        raise RuntimeError(f"lmcache role unavailable: {BLOCKED_REASON}")


def extra_pythonpath() -> List[str]:
    """Site dirs the replicas (connector) and the server need, LMCache's first. The vLLM
    carry's site (/tmp/site) stays on PYTHONPATH as before: shared packages are the same
    versions in both."""
    _require()
    _stage()
    return [str(SITE)]


def kv_transfer_config(replica_index: int) -> dict:
    """The --kv-transfer-config of replica `replica_index`: all replicas share the node's one
    server (same model name + token-hash keys, so a prefix stored by one replica is a hit
    for the others)."""
    _require()
    if replica_index < 0:
        raise ValueError(f"replica_index must be >= 0, got {replica_index}")
    port = _server_port if _server_port is not None else int(_knob("LMCACHE_PORT"))
    return {
        "kv_connector": CONNECTOR,
        "kv_connector_module_path": CONNECTOR_MODULE,
        "kv_role": "kv_both",
        "kv_connector_extra_config": {"lmcache.mp.host": "tcp://127.0.0.1",
                                      "lmcache.mp.port": port},
    }


def _healthy(http_port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/healthcheck",
                                    timeout=2) as r:
            return r.status == 200 and json.loads(r.read() or b"{}").get("status") == "healthy"
    except (OSError, ValueError):
        return False


def _tail(path: pathlib.Path, n: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


def start_server(workdir: pathlib.Path, env: dict) -> subprocess.Popen | None:
    """Starts the node's LMCache MP server and returns once /healthcheck says healthy (its
    ZMQ socket is bound before that). Log: workdir/lmcache_server.log. Raises RuntimeError
    if it exits or is not healthy within LMCACHE_START_TIMEOUT_S."""
    global _server_port
    _require()
    _stage()
    workdir = pathlib.Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    l1_gb = float(_knob("LMCACHE_L1_SIZE_GB", env))
    chunk = int(_knob("LMCACHE_CHUNK_SIZE", env))
    workers = int(_knob("LMCACHE_MAX_WORKERS", env))
    port = int(_knob("LMCACHE_PORT", env))
    http_port = int(_knob("LMCACHE_HTTP_PORT", env))
    timeout_s = float(_knob("LMCACHE_START_TIMEOUT_S", env))
    senv = {k: str(v) for k, v in env.items()}
    senv.pop("CUDA_VISIBLE_DEVICES", None)
    gpus = env.get("LMCACHE_SERVER_CUDA_VISIBLE_DEVICES") or os.environ.get(
        "LMCACHE_SERVER_CUDA_VISIBLE_DEVICES")
    if gpus:
        senv["CUDA_VISIBLE_DEVICES"] = gpus
    path = [p for p in senv.get("PYTHONPATH", "").split(os.pathsep) if p]
    senv["PYTHONPATH"] = os.pathsep.join([str(SITE)] + [p for p in path if p != str(SITE)])
    senv.update(PYTHONUNBUFFERED="1", LMCACHE_TRACK_USAGE="false", DO_NOT_TRACK="1",
                LMCACHE_DISABLE_BANNER="1")
    cmd = [sys.executable, "-m", SERVER_MODULE,
           "--host", "127.0.0.1", "--port", str(port),
           "--http-host", "127.0.0.1", "--http-port", str(http_port),
           "--l1-size-gb", f"{l1_gb:g}",
           "--l1-init-size-gb", str(max(1, min(20, int(l1_gb)))),
           "--eviction-policy", "LRU",
           "--chunk-size", str(chunk), "--max-workers", str(workers)]
    cmd += shlex.split(_knob("LMCACHE_SERVER_ARGS", env))
    log_path = workdir / "lmcache_server.log"
    (workdir / "lmcache_server.cmd").write_text(shlex.join(cmd) + "\n")
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(cmd, cwd=str(workdir), env=senv, stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"LMCache server exited with {proc.returncode}; "
                               f"{log_path}:\n{_tail(log_path)}")
        if _healthy(http_port):
            _server_port = port
            return proc
        time.sleep(1.0)
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
    raise RuntimeError(f"LMCache server not healthy after {timeout_s:.0f} s; "
                       f"{log_path}:\n{_tail(log_path)}")
