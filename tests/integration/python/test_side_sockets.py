"""The daemon's side sockets (shared-memory fd, fast path) reached from another mount view.

kvstratad advertises its `<socket>.shm` and `<socket>.lookup` paths as it sees them. A
client in another mount namespace (a container that mounts the socket directory at another
path, as deploy/container's image was run with `-v /tmp/x:/run/kvstrata`) cannot open those
paths, but finds the same sockets beside the endpoint it connected to. Here the socket
directory is renamed after the daemon started: the advertised paths are gone, the sockets
(bound to their inodes) still answer at the new place.
"""
from __future__ import annotations

import os
from pathlib import Path

import kvstrata
from kvs_testing import mha_spec


def test_host_io_and_fast_lookups_beside_the_endpoint(daemon_factory, sock_dir: Path) -> None:
    seen_by_daemon = sock_dir / "a"
    seen_by_us = sock_dir / "b"
    seen_by_daemon.mkdir()
    d = daemon_factory(socket=seen_by_daemon / "kvstrata.sock")
    seen_by_daemon.rename(seen_by_us)
    with kvstrata.Session(endpoint=str(seen_by_us / "kvstrata.sock")) as s:
        advertised = s.open_response.shm_fd_socket
        assert advertised.startswith(str(seen_by_daemon)) and not os.path.exists(advertised)
        assert s.side_socket(advertised) == str(seen_by_us / "kvstrata.sock.shm")
        ns = s.register_namespace(**mha_spec(model="kvstrata-test/side-sockets"))
        keys = [os.urandom(32) for _ in range(4)]
        blocks = [os.urandom(ns.bytes_per_block) for _ in keys]
        assert s.store(ns, keys, blocks).stored == 4
        hit = s.lookup(ns, keys)
        assert hit.hit_blocks == 4 and hit.fast  # the fast path, found beside the endpoint
        got = s.load(ns, keys)
        assert all(got) and [bytes(b) for b in got.blocks] == blocks
    assert d.running()


def test_advertised_paths_win_when_they_exist(daemon) -> None:
    with kvstrata.Session(endpoint=daemon.endpoint) as s:
        shm = s.open_response.shm_fd_socket
        assert os.path.exists(shm) and s.side_socket(shm) == shm
        assert s.side_socket("") == ""
        gone = "/nonexistent-kvstrata-dir/other.sock.shm"
        assert s.side_socket(gone) == gone  # nothing of that name beside the endpoint either
