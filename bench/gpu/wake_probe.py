#!/usr/bin/env python3
"""How long this host takes to wake the threads a job completion passes through, against
how long they slept: the floor under engine_jobs.py's client-side gap.

    python3 bench/gpu/wake_probe.py [--idle-ms 0.2,1,5,20,80] [--repeats 40] [--out X.json]

A child process sleeps `idle` ms, stamps the wall clock and writes 8 bytes to a Unix socket.
This process has what a kvstrata.Session had before its waiting thread read the job socket
itself (fourteenth session): a reader thread blocked in recv() on that socket, which stamps
the arrival and notifies a threading.Condition, and the main thread blocked in
Condition.wait(), which stamps its return. p50 / p99 per idle time, in µs, of
  to_reader  the child's write -> the reader thread back from recv()
  to_waiter  the reader's notify -> the main thread back from wait()
Needs no GPU.
"""
from __future__ import annotations

import argparse
import json
import math
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional

CHILD = r"""
import socket, struct, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.connect(sys.argv[1])
while True:
    ask = s.recv(8)
    if len(ask) < 8: break
    (idle,) = struct.unpack("d", ask)
    time.sleep(idle)
    s.sendall(struct.pack("d", time.time()))
"""


def p99(xs: List[float]) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, math.ceil(0.99 * len(s)) - 1)]


def probe(idle_ms: List[float], repeats: int, path: str) -> Dict[str, Dict[str, float]]:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    child = subprocess.Popen([sys.executable, "-c", CHILD, path])
    conn, _ = server.accept()
    cond = threading.Condition()
    got: List[tuple] = []

    def reader() -> None:
        while True:
            data = conn.recv(8, socket.MSG_WAITALL)
            if len(data) < 8:
                return
            now = time.time()
            with cond:
                got.append((struct.unpack("d", data)[0], now))
                cond.notify_all()

    threading.Thread(target=reader, daemon=True).start()
    out: Dict[str, Dict[str, float]] = {}
    try:
        for idle in idle_ms:
            to_reader, to_waiter = [], []
            for _ in range(repeats + 2):
                with cond:
                    got.clear()
                    conn.sendall(struct.pack("d", idle / 1e3))
                    while not got:
                        cond.wait(10)
                    woke = time.time()
                    sent, read = got[0]
                to_reader.append(read - sent)
                to_waiter.append(woke - read)
            to_reader, to_waiter = to_reader[2:], to_waiter[2:]  # Warm-up.
            out[f"{idle:g}"] = {
                "to_reader_us_p50": statistics.median(to_reader) * 1e6,
                "to_reader_us_p99": p99(to_reader) * 1e6,
                "to_waiter_us_p50": statistics.median(to_waiter) * 1e6,
                "to_waiter_us_p99": p99(to_waiter) * 1e6}
    finally:
        conn.shutdown(socket.SHUT_RDWR)  # Ends the child's recv() and our reader's.
        conn.close()
        server.close()
        child.wait(10)
    return out


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--idle-ms", default="0.2,1,5,20,80")
    ap.add_argument("--repeats", type=int, default=40)
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        result = probe([float(x) for x in args.idle_ms.split(",")], args.repeats,
                       str(Path(tmp) / "wake.sock"))
    print(f"{'idle ms':>8}{'to_reader us p50/p99':>24}{'to_waiter us p50/p99':>24}")
    for idle, r in result.items():
        print(f"{idle:>8}{r['to_reader_us_p50']:>13.0f}/{r['to_reader_us_p99']:<10.0f}"
              f"{r['to_waiter_us_p50']:>13.0f}/{r['to_waiter_us_p99']:<10.0f}", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps({"benchmark": "wake_probe", "repeats": args.repeats,
                                              "idle_ms": result}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
