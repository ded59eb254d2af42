"""Helpers shared by the integration tests: a real kvstratad process, specs, assertions."""
from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional

import grpc
import pytest

import kvstrata

REPO = Path(__file__).resolve().parents[3]
DEFAULT_DAEMON = REPO / "build" / "daemon" / "server" / "kvstratad"
BUNDLED_DAEMON = REPO / ".bundle" / "bin" / "kvstratad"  # scripts/bundle.sh (GPU hosts)
SOCKET_NAME = "kvstrata.sock"
BASE_SETTINGS = {"l1.capacity": "64MiB", "l2.enabled": "false"}
L1_CAPACITY = 64 << 20
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 20.0
DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "fp8_e4m3": 1, "fp8_e5m2": 1, "uint8": 1}


def daemon_binary() -> Path:
    """$KVSTRATA_DAEMON, else build/, else .bundle/; fails the test with a hint when absent."""
    env = os.environ.get("KVSTRATA_DAEMON")
    candidates = [Path(env)] if env else [DEFAULT_DAEMON, BUNDLED_DAEMON]
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    pytest.fail("kvstratad not found at " + " or ".join(map(str, candidates)) + ": build it "
                "(cmake --build build --target kvstratad), run scripts/bundle.sh, or set "
                "KVSTRATA_DAEMON", pytrace=False)


class Daemon:
    """One kvstratad process on <workdir>/kvstrata.sock, logging to <workdir>/kvstratad.log.

    Started with --socket, --metrics_address=127.0.0.1:0 and one --set holding
    BASE_SETTINGS plus `settings` (dotted config keys); `env`: variables added to its
    environment (e.g. stalled_mount.StalledMount's).
    """

    start_timeout_s = START_TIMEOUT_S
    stop_timeout_s = STOP_TIMEOUT_S

    def __init__(self, workdir: Path, settings: Optional[Dict[str, str]] = None,
                 socket: Optional[Path] = None, env: Optional[Dict[str, str]] = None) -> None:
        self.workdir = workdir
        self.env = dict(env or {})
        self.socket = socket or workdir / SOCKET_NAME
        self.log_path = workdir / f"kvstratad-{os.getpid()}-{time.monotonic_ns()}.log"
        merged = {**BASE_SETTINGS, **(settings or {})}
        self.args = [str(daemon_binary()), f"--socket={self.socket}",
                     "--metrics_address=127.0.0.1:0",
                     "--set=" + ",".join(f"{k}={v}" for k, v in merged.items())]
        self.proc: Optional[subprocess.Popen] = None

    @property
    def endpoint(self) -> str:
        return str(self.socket)

    def spawn(self) -> subprocess.Popen:
        """Start the process without waiting for it to serve."""
        env = {k: v for k, v in os.environ.items() if k != "KVSTRATA_SOCKET"}
        env["XDG_CACHE_HOME"] = str(self.workdir / "cache")  # Never touch the real home.
        env.update(self.env)
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=env)
        return self.proc

    def start(self) -> "Daemon":
        """Spawn and wait until the socket answers the gRPC health check with SERVING."""
        self.spawn()
        try:
            self._wait_serving()
        except BaseException:
            self.kill()  # Never leave a daemon behind when start-up fails.
            raise
        return self

    def _wait_serving(self) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"kvstratad exited with {self.proc.returncode} during start-up:\n"
                            f"{self.log_tail()}", pytrace=False)
            if self.socket.exists() and self._serving():
                return
            time.sleep(0.05)
        pytest.fail(f"kvstratad did not answer the health check within {self.start_timeout_s}s:\n"
                    f"{self.log_tail()}", pytrace=False)

    def _serving(self) -> bool:
        # A fresh channel per try: a channel that failed once backs off before reconnecting.
        with kvstrata.Client(self.endpoint, timeout=1.0) as client:
            try:
                return client.is_serving()
            except kvstrata.KVStrataError:
                return False

    def client(self, **kwargs) -> kvstrata.Client:
        """A new Client on this daemon's socket."""
        return kvstrata.Client(self.endpoint, **kwargs)

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> int:
        """SIGTERM and wait; returns the exit status (SIGKILL and fail after the timeout)."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=self.stop_timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"kvstratad ignored SIGTERM for {self.stop_timeout_s}s:\n{self.log_tail()}",
                        pytrace=False)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def run_daemon(daemon: Daemon) -> Iterator[Daemon]:
    """Generator for fixtures: starts `daemon`, yields it, then requires it alive and a
    clean exit 0 on SIGTERM; always kills it and removes its working directory."""
    daemon.start()
    try:
        yield daemon
        assert daemon.running(), f"kvstratad died during the tests:\n{daemon.log_tail()}"
        rc = daemon.stop()
        assert rc == 0, f"kvstratad exited with {rc} on SIGTERM:\n{daemon.log_tail()}"
    finally:
        daemon.kill()
        shutil.rmtree(daemon.workdir, ignore_errors=True)


def daemons() -> Iterator[Callable[..., Daemon]]:
    """Generator for a fixture that starts extra daemons in one test:
    start(settings=None, socket=None, wait=True, env=None) -> Daemon (wait=False only
    spawns it; env: added to its environment).
    Each is SIGTERMed (killed if stuck) and its directory removed afterwards."""
    started: List[Daemon] = []
    dirs: List[Path] = []

    def start(settings: Optional[Dict[str, str]] = None, socket: Optional[Path] = None,
              wait: bool = True, env: Optional[Dict[str, str]] = None) -> Daemon:
        dirs.append(short_tmpdir())
        started.append(Daemon(dirs[-1], settings, socket=socket, env=env))
        if wait:
            started[-1].start()
        else:
            started[-1].spawn()
        return started[-1]

    yield start
    for d in started:
        if d.running():
            d.stop()
        d.kill()
    for path in dirs:
        shutil.rmtree(path, ignore_errors=True)


def short_tmpdir() -> Path:
    """A short temporary directory: Unix socket paths are limited to ~100 bytes."""
    return Path(tempfile.mkdtemp(prefix="kvspy-", dir="/tmp"))


def mha_spec(**overrides) -> dict:
    """A valid small MHA namespace spec as friendly keyword fields."""
    spec = dict(engine="other", model="kvstrata-test/tiny", dtype="bfloat16", num_layers=4,
                num_kv_heads=2, head_size=64, tokens_per_block=16, kv_layout="vllm_nhd")
    spec.update(overrides)
    return spec


def assert_code(excinfo: pytest.ExceptionInfo, code: grpc.StatusCode) -> None:
    """The raised KVStrataError carries `code` and a non-empty message."""
    err = excinfo.value
    assert isinstance(err, kvstrata.KVStrataError)
    assert err.code == code, f"expected {code.name}, got {err.code.name}: {err.message}"
    assert err.message, "the daemon should explain the error"


def assert_serving(client: kvstrata.Client) -> None:
    """The daemon still answers: health check SERVING and GetStatus works."""
    assert client.is_serving()
    assert client.get_status().version


def wait_until(predicate, timeout_s: float, interval_s: float = 0.05) -> bool:
    """Poll predicate() until it is true or timeout_s passes; returns its last value."""
    deadline = time.monotonic() + timeout_s
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return bool(predicate())
        time.sleep(interval_s)


def raise_fd_limit(wanted: int) -> int:
    """Raises this process's soft RLIMIT_NOFILE (inherited by daemons it starts) towards
    `wanted`, as far as the hard limit allows; the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < wanted:
        soft = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    return soft
