#!/usr/bin/env python3
"""What a GPU job's submit costs the engine's thread: kvstrata.Session.submit_load of 64 and
512 blocks over the job socket (issue 14: <= 300 us for 512 blocks), without a GPU.

    KVSTRATA_DAEMON=build/daemon/server/kvstratad python3 bench/rpc/submit_cost.py

A real kvstratad opens the session; its job frames go to bench/rpc/completion_wait.py's
stand-in for the daemon's fast-path socket (a child process that answers each frame and
writes its completion 2 ms later). Each submit is timed alone, then waited for. Beside it, in
the same run, the floor: the same frame built by hand (struct, key join, id array) and
written with sendall() to a socket another process drains. p50 / p90 over --jobs submits.
Run it once per client build (PYTHONPATH=<site of the build> first) for an A/B.
"""
from __future__ import annotations

import argparse
import array
import multiprocessing
import os
import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from completion_wait import MAGIC, REQUEST, stand_in_session, summary  # noqa: E402


def drain(sock: socket.socket) -> None:
    while sock.recv(1 << 16):
        pass


def floor(keys: list, ids: list, jobs: int) -> list:
    """Microseconds to build the frame by hand and write it to a drained socket."""
    ours, theirs = socket.socketpair()
    child = multiprocessing.Process(target=drain, args=(theirs,), daemon=True)
    child.start()
    took = []
    for _ in range(jobs):
        t0 = time.perf_counter()
        frame = b"".join((REQUEST.pack(MAGIC, 2, 2, 1, 2, len(keys), len(keys[0]), 0, 7, 0),
                          b"".join(keys), array.array("I", ids).tobytes()))
        ours.sendall(frame)
        took.append((time.perf_counter() - t0) * 1e6)
        time.sleep(0.002)
    ours.close()
    child.join(timeout=5)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=300)
    args = parser.parse_args()
    import kvstrata

    with stand_in_session(0.002, "submit-cost", "kvsc") as (s, ns):
        print(f"{kvstrata.__file__}:")
        for n in (64, 512):
            keys = [os.urandom(32) for _ in range(n)]
            ids = list(range(n))
            took = []
            for _ in range(args.jobs):
                t0 = time.perf_counter()
                job = s.submit_load(ns, 7, keys, ids)
                took.append((time.perf_counter() - t0) * 1e6)
                s.wait_job(job, timeout=5)
            print(f"  {n:3d} blocks: submit_load {summary(took)}")
            base = floor(keys, ids, args.jobs)
            print(f"             floor, the frame built and written by hand {summary(base)}")
        s.close()


if __name__ == "__main__":
    main()
