"""What the churn soak (torture.py) watches besides the bytes: the daemon's growth, its
answers, and connections that never speak.

- DaemonWatch samples the daemon process every SAMPLE_S -- resident memory (VmRSS), open
  file descriptors, threads -- and, every PROBE_S, times a gRPC GetStatus and a lookup over
  the fast path. Growth is judged per daemon process (the soak kill -9s and restarts it):
  the median of its last 3 samples minus the median of its first 3 taken after WARMUP_S.
  A probe slower than a second, or one that fails, is counted as unanswered unless the
  daemon was being restarted (from the kill to RESTART_GRACE_S after it serves again).
- IdleConnections holds connections on every socket the daemon listens on -- gRPC, the
  lookup fast path, the shared-memory fd socket, metrics -- half of them silent, half
  stopped inside a request; reopened after each daemon restart.
Threads of the soak's own process; everything is read under one lock.
"""
from __future__ import annotations

import os
import socket
import statistics
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

SAMPLE_S = 1.0
PROBE_S = 0.25
WARMUP_S = 5.0
RESTART_GRACE_S = 2.0
SLOW_S = 1.0


def process_sample(pid: int) -> Optional[Tuple[float, int, int]]:
    """(resident MiB, open fds, threads) of a live process, None once it is gone."""
    try:
        status = open(f"/proc/{pid}/status").read()
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    rss_kib = int(fields.get("VmRSS", "0 kB").split()[0])
    return rss_kib / 1024.0, fds, int(fields.get("Threads", "0"))


@dataclass
class _Incarnation:
    pid: int
    started: float
    samples: List[Tuple[float, int, int]] = field(default_factory=list)


class DaemonWatch:
    def __init__(self, daemon: Any, namespace_spec: Dict[str, Any]) -> None:
        self.daemon = daemon
        self.spec = namespace_spec
        self._lock = threading.Lock()
        self._incarnations: List[_Incarnation] = []
        self._restarting_until = 0.0       # a kill in progress: probes do not count
        self.probes = 0
        self.unanswered: List[str] = []
        self.slowest_s = 0.0
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._sample_loop, daemon=True),
                         threading.Thread(target=self._probe_loop, daemon=True)]

    def start(self) -> None:
        self.serving()
        for t in self._threads:
            t.start()

    def restarting(self) -> None:
        """The daemon is about to be killed: probes pause until serving()."""
        with self._lock:
            self._restarting_until = float("inf")

    def serving(self) -> None:
        """A (new) daemon process serves."""
        with self._lock:
            self._incarnations.append(_Incarnation(self.daemon.proc.pid, time.monotonic()))
            self._restarting_until = time.monotonic() + RESTART_GRACE_S

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(5)

    def _sample_loop(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            with self._lock:
                inc = self._incarnations[-1]
            if time.monotonic() - inc.started < WARMUP_S:
                continue
            sample = process_sample(inc.pid)
            if sample is not None:
                with self._lock:
                    inc.samples.append(sample)

    def _probe_loop(self) -> None:
        import kvstrata

        session = None
        ns = None
        while not self._stop.wait(PROBE_S):
            with self._lock:
                counts = time.monotonic() >= self._restarting_until
            start = time.monotonic()
            what = "GetStatus"
            try:
                with self.daemon.client(timeout=5.0) as c:
                    c.get_status()
                what = "lookup"
                if session is None:
                    session = kvstrata.Session(endpoint=self.daemon.endpoint,
                                               client_name="soak-probe", timeout=5.0)
                    ns = session.register_namespace(**self.spec)
                session.lookup(ns, [b"\x01" * 32])
                failed = None
            except Exception as err:  # noqa: BLE001 - an unanswered call is the finding
                failed = f"{what}: {type(err).__name__}: {err}"[:200]
                if session is not None:
                    session.close()
                session = None
            took = time.monotonic() - start
            with self._lock:
                if not counts or time.monotonic() < self._restarting_until:
                    continue
                self.probes += 1
                self.slowest_s = max(self.slowest_s, took)
                if failed or took > SLOW_S:
                    self.unanswered.append(failed or f"{what} took {took:.2f} s")
        if session is not None:
            session.close()

    def growth(self) -> Dict[str, float]:
        """The largest growth over the daemon processes that were sampled long enough:
        rss_mib, fds, threads (0 when none was)."""
        out = {"rss_mib": 0.0, "fds": 0.0, "threads": 0.0, "sampled_s": 0.0}
        with self._lock:
            incs = [i for i in self._incarnations if len(i.samples) >= 6]
        for inc in incs:
            first, last = inc.samples[:3], inc.samples[-3:]
            for k, idx in (("rss_mib", 0), ("fds", 1), ("threads", 2)):
                d = statistics.median(s[idx] for s in last) - \
                    statistics.median(s[idx] for s in first)
                out[k] = max(out[k], d)
            out["sampled_s"] = max(out["sampled_s"], len(inc.samples) * SAMPLE_S)
        return out


class IdleConnections:
    """`per_socket` connections on each of the daemon's sockets, held until close()."""

    def __init__(self, daemon: Any, per_socket: int) -> None:
        self.daemon = daemon
        self.per_socket = per_socket
        self._socks: List[socket.socket] = []
        self.opened = 0

    def open(self) -> None:
        """(Re)open them on the daemon that serves now."""
        self.close()
        if self.per_socket <= 0:
            return
        import kvstrata

        with kvstrata.Session(endpoint=self.daemon.endpoint, client_name="soak-idle",
                              timeout=5.0) as session:
            metrics = session.client.get_status().metrics_address
            unix = [self.daemon.endpoint,
                    session.side_socket(session.open_response.lookup_socket),
                    session.side_socket(session.open_response.shm_fd_socket)]
        host, port = metrics.rsplit(":", 1)
        partial = {0: b"PRI * HTTP/2.0\r\n",                 # gRPC: half a preface
                   1: struct.pack("<IH", 0x4C53564B, 1),     # lookup: half a header
                   2: b"\x01\x02\x03"}                        # fd socket: 3 of 8 bytes
        for n, path in enumerate(unix):
            for i in range(self.per_socket):
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                self._connect(s, path, partial.get(n, b"") if i % 2 else b"")
        for i in range(self.per_socket):
            s = socket.create_connection((host, int(port)), timeout=5)
            if i % 2:
                s.sendall(b"GET /metr")
            self._socks.append(s)
            self.opened += 1

    def _connect(self, s: socket.socket, path: str, partial: bytes) -> None:
        s.settimeout(5)
        try:
            s.connect(path)
            if partial:
                s.sendall(partial)
        except OSError:
            s.close()
            return
        self._socks.append(s)
        self.opened += 1

    def close(self) -> None:
        for s in self._socks:
            s.close()
        self._socks = []
