#!/usr/bin/env python3
"""How long a completion takes from the daemon's socket into the thread in wait_job: the
client's share of every job (issue 14), without a GPU.

    KVSTRATA_DAEMON=build/daemon/server/kvstratad \
        python3 bench/rpc/completion_wait.py [--delay-ms 6] [--jobs 400]

A real kvstratad opens the session; its job frames go to a stand-in for the daemon's
fast-path socket in a child process, which answers each frame at once and writes the job's
completion frame `delay` ms later, stamping the wall clock of that write (µs) into the
frame's elapsed_us. This process submits a 512-block load and waits for it (wait_job),
job after job, and prints p50 / p90 of its wait's return minus that stamp, and the CPU this
process spent per job (time.process_time over submit and wait: every thread of it, the
waiting thread's spin before the completion included; `--spin-s 0` turns the spin off, for
its cost). Beside it, in
the same run, the floor: the same child, after the same delay, stamps and writes 8 bytes to
a socket this process's main thread waits on in recv() (one wake-up, no Python between). Run
it once per client build (PYTHONPATH=<site of the build> first) for an A/B on one machine.
"""
from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import socket
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(1, str(REPO / "tests" / "integration" / "python"))
REQUEST = struct.Struct("<IHHQIIIIQQ")   # docs/wire-protocol.md, "Job frames"
ANSWER = struct.Struct("<IIQI")
COMPLETION = struct.Struct("<IHHQQQII")
MAGIC, COMPLETION_MAGIC = 0x4A53564B, 0x4353564B


def serve(path: str, delay_s: float, session_id: int) -> None:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)
    conn, _ = listener.accept()
    job = 100
    while True:
        head = conn.recv(REQUEST.size, socket.MSG_WAITALL)
        if len(head) < REQUEST.size:
            return
        h = REQUEST.unpack(head)
        conn.recv(h[5] * (h[6] + 4), socket.MSG_WAITALL)
        job += 1
        conn.sendall(ANSWER.pack(MAGIC, 0, job, 0))
        time.sleep(delay_s)
        conn.sendall(COMPLETION.pack(COMPLETION_MAGIC, 2, 0, session_id, job,
                                     time.time_ns() // 1000, 0, 0))


def floor_child(sock: socket.socket, delay_s: float) -> None:
    while sock.recv(1):
        time.sleep(delay_s)
        sock.sendall(struct.pack("<Q", time.time_ns() // 1000))


def floor(delay_s: float, rounds: int) -> list:
    """The gaps (µs) of a main thread blocked in recv() woken by the child's stamped write."""
    ours, theirs = socket.socketpair()
    child = multiprocessing.Process(target=floor_child, args=(theirs, delay_s), daemon=True)
    child.start()
    gaps = []
    for _ in range(rounds):
        ours.sendall(b"x")
        (stamp,) = struct.unpack("<Q", ours.recv(8, socket.MSG_WAITALL))
        gaps.append(time.time_ns() / 1000 - stamp)
        time.sleep(0.002)
    ours.close()
    child.join(timeout=5)
    return gaps


@contextlib.contextmanager
def stand_in_session(delay_s: float, name: str, prefix: str):
    """A kvstrata.Session on a real kvstratad, with a namespace, whose job frames go to
    serve() in a child process (completions `delay_s` after each frame): yields (session,
    namespace). Stops the daemon at the end."""
    import kvstrata
    from kvs_testing import Daemon, mha_spec

    tmp = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    daemon = Daemon(tmp).start()
    try:
        s = kvstrata.Session(daemon.client(), client_name=name)
        ns = s.register_namespace(**mha_spec(model=name))
        path = str(tmp / "jobs.sock")
        child = multiprocessing.Process(target=serve, daemon=True,
                                        args=(path, delay_s, s.open_response.session_id))
        child.start()
        while not os.path.exists(path):
            time.sleep(0.01)
        s._conn._side_sockets[s.open_response.lookup_socket] = path  # Job frames go to the child.
        yield s, ns
    finally:
        daemon.stop()


def summary(gaps: list) -> str:
    gaps = sorted(gaps[3:])
    return (f"p50 {statistics.median(gaps):.0f} us, p90 {gaps[int(len(gaps) * 0.9)]:.0f} us "
            f"(n={len(gaps)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--delay-ms", type=float, default=6.0)
    parser.add_argument("--jobs", type=int, default=400)
    parser.add_argument("--spin-s", type=float, default=None,
                        help="the session's completions().spin_s (default: the client's own)")
    args = parser.parse_args()
    import kvstrata

    with stand_in_session(args.delay_ms / 1e3, "completion-wait", "kvcw") as (s, ns):
        if args.spin_s is not None:
            s.completions().spin_s = args.spin_s
        keys = [os.urandom(32) for _ in range(512)]
        gaps, cpu = [], []
        for _ in range(args.jobs):
            c0 = time.process_time()
            c = s.wait_job(s.submit_load(ns, 7, keys, range(512)), timeout=5)
            gaps.append(time.time_ns() / 1000 - c.elapsed_us)
            cpu.append((time.process_time() - c0) * 1e6)
            time.sleep(0.002)  # The engine's work between two jobs.
        spin = s.completions().spin_s
        s.close()
        base = floor(args.delay_ms / 1e3, args.jobs)
        print(f"{kvstrata.__file__}: delay {args.delay_ms:g} ms, spin_s {spin:g}")
        print(f"  completion written -> wait_job returned: {summary(gaps)}")
        print(f"  this process's CPU per job (submit + wait): {summary(cpu)}")
        print(f"  floor, 8 bytes written -> recv() returned:  {summary(base)}")


if __name__ == "__main__":
    main()
