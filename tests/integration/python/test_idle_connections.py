"""Issue 46: the daemon's side sockets hold against 1,000 idle or half-open connections.

The lookup fast-path socket and the shared-memory fd socket each run a thread per
connection (daemon/server/connection_threads.h), with a cap and the idlest evicted when it
is full; the fd socket bounds each exchange by 2 s. Here 1,000 connections sit on each --
half of them silent, half stopped inside a request frame -- while a real session keeps
looking up over the fast path and mapping the region through the fd socket: every lookup
answers right (the hits stored), the fast path keeps answering rather than falling back to
gRPC, and p99 of either stays under 100 ms. The metrics endpoint's own case is in
test_metrics.py.

The fd socket gets 100 more than its 1,024-connection table: the ones waiting longest for
their session id are closed to admit new ones (the lookup socket closes those idle for
1 s)."""
from __future__ import annotations

import os
import socket
import struct
import time
from typing import List

import numpy as np

import kvstrata
from kvstrata.fast_path import LOOKUP_MAGIC
from kvstrata.shm import receive_region_fd
from kvs_testing import Daemon, mha_spec, raise_fd_limit, short_tmpdir

IDLE = 1000
CALLS = 100
BLOCK = 4096


def idle_connections(path: str, count: int, partial: bytes) -> List[socket.socket]:
    """`count` connections to the Unix socket at `path`: the even ones silent, the odd ones
    having sent `partial` (the start of a request) and nothing more."""
    out = []
    for i in range(count):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(5)
        s.connect(path)
        if i % 2:
            s.sendall(partial)
        out.append(s)
    return out


def p99_ms(seconds: List[float]) -> float:
    seconds = sorted(seconds)
    return seconds[int(len(seconds) * 0.99) - 1] * 1e3


def test_a_thousand_idle_connections_on_the_side_sockets() -> None:
    limit = raise_fd_limit(2 * IDLE + 612)
    assert limit >= 2 * IDLE + 356, f"RLIMIT_NOFILE {limit} is too low for {2 * IDLE} sockets"
    d = Daemon(short_tmpdir(), {"l1.capacity": "8MiB", "l1.slab_size": "1MiB"}).start()
    idle: List[socket.socket] = []
    try:
        with d.client(timeout=10.0) as c, kvstrata.Session(c, client_name="idle") as s:
            ns = s.register_namespace(**mha_spec(kv_layout="opaque", dtype="uint8",
                                                 opaque_block_bytes=BLOCK, salt="idle"))
            keys = [i.to_bytes(32, "big") for i in range(16)]
            assert s.store(ns, keys, [np.full(BLOCK, i, np.uint8) for i in range(16)]).stored == 16
            lookup_path = s.side_socket(s.open_response.lookup_socket)
            fd_path = s.side_socket(s.open_response.shm_fd_socket)
            # Half-open lookups: the magic and version of a 32-byte header, then silence.
            idle += idle_connections(lookup_path, IDLE, struct.pack("<IH", LOOKUP_MAGIC, 1))
            idle += idle_connections(fd_path, IDLE + 100, b"\x01\x02\x03")  # 3 of 8 id bytes
            lookups, maps = [], []
            for i in range(CALLS):
                start = time.monotonic()
                r = s.lookup(ns, keys[: 1 + i % 16])
                lookups.append(time.monotonic() - start)
                assert r.hit_blocks == 1 + i % 16 and r.fast, r
                start = time.monotonic()
                fd, size = receive_region_fd(fd_path, s.session_id, 5.0)
                maps.append(time.monotonic() - start)
                assert size > 0
                os.close(fd)
            print(f"{IDLE} + {IDLE + 100} idle: lookup p99 {p99_ms(lookups):.1f} ms, "
                  f"region fd p99 {p99_ms(maps):.1f} ms")
            assert p99_ms(lookups) <= 100, f"lookup p99 {p99_ms(lookups):.1f} ms"
            assert p99_ms(maps) <= 100, f"region fd p99 {p99_ms(maps):.1f} ms"
    finally:
        for sock in idle:
            sock.close()
        assert d.stop() == 0, d.log_tail()
        d.kill()
