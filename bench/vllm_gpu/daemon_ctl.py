"""One kvstratad for the vLLM GPU benchmark, controllable from any of its processes.

The daemon runs in its own process session (it outlives the engine process that restarted
it); its pid is kept in <workdir>/kvstratad.pid, so the orchestrator and every engine process
can stop, kill -9 or restart the same daemon. Its L2 directory is <workdir>/l2 and survives
restarts (the "L2 hit" rows); L1 (shared memory) does not.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import kvstrata


class DaemonCtl:
    def __init__(self, binary: str, workdir: str, settings: Dict[str, str]) -> None:
        self.binary = binary
        self.workdir = Path(workdir)
        self.settings = dict(settings)
        self.socket = self.workdir / "kvstrata.sock"
        self.pid_file = self.workdir / "kvstratad.pid"
        self.log_path = self.workdir / "kvstratad.log"

    @property
    def endpoint(self) -> str:
        return str(self.socket)

    def pid(self) -> Optional[int]:
        try:
            pid = int(self.pid_file.read_text())
        except (OSError, ValueError):
            return None
        return pid if _alive(pid) else None

    def start(self, timeout_s: float = 120.0) -> float:
        """Start and wait until it answers the health check; seconds it took. A daemon
        killed a moment ago may still hold the socket lock while its threads exit: a start
        refused for that is retried for a few seconds."""
        t0 = time.monotonic()
        self.workdir.mkdir(parents=True, exist_ok=True)
        args = [self.binary, f"--socket={self.socket}", "--metrics_address=127.0.0.1:0",
                "--set=" + ",".join(f"{k}={v}" for k, v in self.settings.items())]

        def spawn() -> subprocess.Popen:
            with open(self.log_path, "ab") as log:
                p = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
            self.pid_file.write_text(str(p.pid))
            return p

        proc = spawn()
        while time.monotonic() - t0 < timeout_s:
            if proc.poll() is not None:
                if "already serving" in self.log_tail(2) and time.monotonic() - t0 < 10:
                    time.sleep(0.1)
                    proc = spawn()
                    continue
                raise RuntimeError(f"kvstratad exited with {proc.returncode}:\n{self.log_tail()}")
            if self.socket.exists() and self.serving():
                return time.monotonic() - t0
            time.sleep(0.05)
        raise RuntimeError(f"kvstratad not serving after {timeout_s}s:\n{self.log_tail()}")

    def serving(self) -> bool:
        with kvstrata.Client(self.endpoint, timeout=1.0) as client:
            try:
                return client.is_serving()
            except kvstrata.KVStrataError:
                return False

    def _signal_and_wait(self, sig: int, timeout_s: float) -> None:
        pid = self.pid()
        if pid is None:
            return
        os.kill(pid, sig)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:  # Reap it when it is our child.
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    return
            except ChildProcessError:
                if not _alive(pid):  # gone, or a zombie that its parent will reap
                    return
            time.sleep(0.02)
        if sig != signal.SIGKILL:
            self._signal_and_wait(signal.SIGKILL, 10.0)

    def stop(self) -> None:
        self._signal_and_wait(signal.SIGTERM, 30.0)

    def kill9(self) -> None:
        self._signal_and_wait(signal.SIGKILL, 10.0)

    def restart(self) -> float:
        self.stop()
        return self.start()

    # ------------------------------------------------------------------ admin

    def sessions(self) -> List[object]:
        with kvstrata.Client(self.endpoint, timeout=2.0) as client:
            return list(client.list_sessions().sessions)

    def tiers(self) -> Dict[str, object]:
        with kvstrata.Client(self.endpoint, timeout=2.0) as client:
            return {t.name: t for t in client.list_tiers().tiers}

    def namespaces(self) -> List[object]:
        """ListNamespaces: NamespaceInfo (fingerprint, spec incl. tp_rank, blocks in all tiers)."""
        with kvstrata.Client(self.endpoint, timeout=5.0) as client:
            return list(client.list_namespaces().namespaces)

    def clear(self, fingerprint: str, timeout_s: float = 60.0) -> List[str]:
        """Clear one namespace in every tier (blocks in use stay); the daemon's messages."""
        with kvstrata.Client(self.endpoint, timeout=timeout_s) as client:
            return [p.message for p in client.clear(fingerprint=fingerprint)]

    def wait_idle(self, timeout_s: float = 30.0) -> float:
        """Until no session has a job in flight and L2 has no pending write; seconds."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout_s:
            try:
                busy = any(s.jobs for s in self.sessions())
                l2 = self.tiers().get("l2")
                busy = busy or (l2 is not None and l2.enabled and l2.queue_depth > 0)
            except kvstrata.KVStrataError:
                busy = True
            if not busy:
                return time.monotonic() - t0
            time.sleep(0.02)
        return time.monotonic() - t0

    def registered(self) -> Dict[str, Tuple[int, int]]:
        """(namespaces, KV cache registrations) of each open session, by client name."""
        return {s.client_name: (s.namespaces, s.registrations) for s in self.sessions()}

    def live_sessions(self) -> List[Dict[str, object]]:
        """Open sessions of processes still alive (a killed engine's sessions linger until
        their heartbeat times out): client name, pid, namespaces, KV cache registrations."""
        return [{"client": s.client_name, "pid": s.pid, "namespaces": s.namespaces,
                 "registrations": s.registrations} for s in self.sessions() if _alive(s.pid)]

    def wait_sessions(self, expected: Dict[str, Tuple[int, int]],
                      timeout_s: float = 30.0) -> float:
        """Until every client in `expected` (from registered() before a restart) has a
        session again with as many namespaces and registrations; seconds."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout_s:
            try:
                now = self.registered()
                if all(name in now and all(a >= b for a, b in zip(now[name], want))
                       for name, want in expected.items()):
                    return time.monotonic() - t0
            except kvstrata.KVStrataError:
                pass
            time.sleep(0.05)
        return time.monotonic() - t0

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")
