"""Host mode without a daemon: the descriptor protocol against a fake server, buffer
validation and the one-copy transfers, and store/load's call sequence on a fake client."""
from __future__ import annotations

import array
import os
import socket
import struct
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import List, Optional

import grpc
import numpy as np
import pytest

import kvstrata
from kvstrata import host, pb
from kvs_testing import short_tmpdir, wait_until

REGION_BYTES = 1 << 20


class FakeFdServer:
    """Answers the shm_fd_socket protocol: known session -> size + memfd, else size 0."""

    def __init__(self, path: Path, session_id: int, size: int = REGION_BYTES,
                 reply: Optional[bytes] = None) -> None:
        self.path, self.session_id, self.size, self.reply = path, session_id, size, reply
        self.fd = os.memfd_create("kvstrata-test")
        os.ftruncate(self.fd, size)
        self.requests: List[int] = []
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(path))
        self.listener.listen(8)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with conn:
                data = b""
                while len(data) < 8:
                    chunk = conn.recv(8 - len(data))
                    if not chunk:
                        break
                    data += chunk
                (sid,) = struct.unpack("<Q", data)
                self.requests.append(sid)
                if self.reply is not None:
                    conn.sendall(self.reply)
                elif sid == self.session_id:
                    socket.send_fds(conn, [struct.pack("<Q", self.size)], [self.fd])
                else:
                    conn.sendall(struct.pack("<Q", 0))

    def close(self) -> None:
        self.listener.close()
        os.close(self.fd)


@pytest.fixture
def fd_server():
    tmp = short_tmpdir()
    servers = []

    def make(session_id: int = 7, **kwargs) -> FakeFdServer:
        servers.append(FakeFdServer(tmp / f"fd{len(servers)}.sock", session_id, **kwargs))
        return servers[-1]

    yield make
    for s in servers:
        s.close()
    for p in tmp.iterdir():
        p.unlink()
    tmp.rmdir()


# ---------------------------------------------------------------------- descriptor protocol


def test_region_maps_the_daemons_memory(fd_server) -> None:
    srv = fd_server(session_id=7)
    fds_before = len(os.listdir("/proc/self/fd"))
    with kvstrata.SharedRegion.open(str(srv.path), 7) as region:
        assert region.size == len(region) == REGION_BYTES and not region.closed
        assert srv.requests == [7]
        region.buffer[100:104] = b"abcd"
        assert os.pread(srv.fd, 4, 100) == b"abcd"  # MAP_SHARED: the daemon sees the write
        os.pwrite(srv.fd, b"xyz", 5000)
        assert bytes(region.view(5000, 3)) == b"xyz"
    assert region.closed
    # The received descriptor is closed at once; mmap's own duplicate goes with close().
    assert wait_until(lambda: len(os.listdir("/proc/self/fd")) == fds_before, 2.0), \
        "a descriptor leaked"
    with pytest.raises(kvstrata.SharedRegionError) as exc:
        region.buffer
    assert exc.value.code == grpc.StatusCode.FAILED_PRECONDITION


def test_unknown_session_is_a_clear_error(fd_server) -> None:
    srv = fd_server(session_id=7)
    with pytest.raises(kvstrata.KVStrataError) as exc:
        kvstrata.SharedRegion.open(str(srv.path), 8)
    assert isinstance(exc.value, kvstrata.SharedRegionError)
    assert exc.value.code == grpc.StatusCode.NOT_FOUND
    assert "session 8" in exc.value.message


def test_missing_socket_is_unavailable(tmp_path) -> None:
    with pytest.raises(kvstrata.SharedRegionError) as exc:
        kvstrata.SharedRegion.open(str(tmp_path / "none.sock"), 1)
    assert exc.value.code == grpc.StatusCode.UNAVAILABLE


def test_empty_socket_path_and_short_answer(fd_server) -> None:
    with pytest.raises(kvstrata.SharedRegionError) as exc:
        kvstrata.SharedRegion.open("", 1)
    assert exc.value.code == grpc.StatusCode.FAILED_PRECONDITION
    srv = fd_server(reply=b"\x01\x02\x03")
    with pytest.raises(kvstrata.SharedRegionError) as exc:
        kvstrata.SharedRegion.open(str(srv.path), 7)
    assert exc.value.code == grpc.StatusCode.INTERNAL
    srv = fd_server(reply=struct.pack("<Q", 4096))  # A size but no descriptor.
    with pytest.raises(kvstrata.SharedRegionError) as exc:
        kvstrata.SharedRegion.open(str(srv.path), 7)
    assert exc.value.code == grpc.StatusCode.INTERNAL


def test_close_refuses_while_views_are_alive(fd_server) -> None:
    srv = fd_server()
    region = kvstrata.SharedRegion.open(str(srv.path), 7)
    arr = np.frombuffer(region.mmap, dtype=np.uint8, count=16, offset=64)
    with pytest.raises(BufferError):
        region.close()
    assert not region.closed
    arr[:] = 9
    assert os.pread(srv.fd, 16, 64) == b"\x09" * 16
    del arr
    region.close()
    region.close()  # idempotent
    assert region.closed


def test_view_bounds(fd_server) -> None:
    srv = fd_server()
    with kvstrata.SharedRegion.open(str(srv.path), 7) as region:
        region.view(REGION_BYTES - 8, 8)
        for off, n in [(REGION_BYTES - 7, 8), (-1, 4), (0, REGION_BYTES + 1)]:
            with pytest.raises(kvstrata.SharedRegionError) as exc:
                region.view(off, n)
            assert exc.value.code == grpc.StatusCode.OUT_OF_RANGE


# ---------------------------------------------------------------------- buffers


class FakeTensor:
    """Enough of a CPU torch tensor: .numpy() shares memory, .detach(), .device."""

    def __init__(self, array: np.ndarray, device: str = "cpu") -> None:
        self._a = array
        self.device = SimpleNamespace(type=device)

    def detach(self) -> "FakeTensor":
        return self

    def numpy(self) -> np.ndarray:
        if self.device.type != "cpu":
            raise TypeError("can't convert cuda tensor to numpy")
        return self._a


N = 4096


def sources(rng: np.random.Generator):
    raw = rng.integers(0, 256, N, dtype=np.uint8)
    f16 = raw.view(np.float16).reshape(32, 64)
    strided = np.zeros((32, 128), dtype=np.float16)
    strided[:, ::2] = f16
    yield "bytes", raw.tobytes(), raw
    yield "bytearray", bytearray(raw.tobytes()), raw
    yield "memoryview", memoryview(raw.tobytes()), raw
    yield "array.array", array.array("f", raw.tobytes()), raw
    yield "numpy-u8", raw.copy(), raw
    yield "numpy-f16-2d", f16.copy(), raw
    yield "numpy-strided", strided[:, ::2], raw
    yield "numpy-fortran", np.asfortranarray(f16), raw
    yield "tensor", FakeTensor(f16.copy()), raw


@pytest.mark.parametrize("kind", [k for k, _, _ in sources(np.random.default_rng(0))])
def test_store_source_copies_exact_bytes(fd_server, kind: str) -> None:
    srv = fd_server()
    _, obj, expected = next(s for s in sources(np.random.default_rng(1)) if s[0] == kind)
    if kind == "numpy-fortran":
        expected = np.ascontiguousarray(obj).view(np.uint8).reshape(-1)
    with kvstrata.SharedRegion.open(str(srv.path), 7) as region:
        with host.RegionCopier(region) as copier:
            copier.to_slot(host.as_source(obj, N, 0), 8192, N)
    got = np.frombuffer(os.pread(srv.fd, N, 8192), dtype=np.uint8)
    assert np.array_equal(got, expected)  # Fortran order: the array's logical (C) order.


@pytest.mark.parametrize("kind", ["bytearray", "numpy-u8", "numpy-f16-2d", "numpy-strided",
                                  "numpy-fortran", "tensor", "array.array"])
def test_load_destination_receives_exact_bytes(fd_server, kind: str) -> None:
    srv = fd_server()
    payload = np.random.default_rng(2).integers(0, 256, N, dtype=np.uint8)
    os.pwrite(srv.fd, payload.tobytes(), 12288)
    _, obj, _ = next(s for s in sources(np.random.default_rng(3)) if s[0] == kind)
    with kvstrata.SharedRegion.open(str(srv.path), 7) as region:
        with host.RegionCopier(region) as copier:
            copier.from_slot(host.as_destination(obj, N, 0), 12288, N)
    if kind in ("bytearray", "array.array"):
        got = np.frombuffer(obj, dtype=np.uint8)
    elif kind == "tensor":
        got = obj.numpy().reshape(-1).view(np.uint8)
    else:  # Logical order of the array = the slot's byte order, whatever the strides.
        got = np.ascontiguousarray(obj).reshape(-1).view(np.uint8)
    assert np.array_equal(got, payload)


@pytest.mark.parametrize("obj, error", [
    (b"x" * (N - 1), ValueError), (np.zeros(N + 1, np.uint8), ValueError),
    (np.zeros(N // 8, dtype=object), ValueError), (FakeTensor(np.zeros(N, np.uint8), "cuda"), ValueError),
    ("x" * N, TypeError), (12345, TypeError),
])
def test_bad_sources_are_rejected(obj, error) -> None:
    with pytest.raises(error):
        host.as_source(obj, N, 3)


def test_read_only_destinations_are_rejected() -> None:
    ro = np.zeros(N, np.uint8)
    ro.flags.writeable = False
    for obj in (b"\0" * N, memoryview(b"\0" * N), ro):
        with pytest.raises(ValueError, match="read-only"):
            host.as_destination(obj, N, 0)


def test_key_bytes() -> None:
    assert host.key_bytes([b"a", bytearray(b"b"), memoryview(b"c")]) == [b"a", b"b", b"c"]
    with pytest.raises(TypeError):
        host.key_bytes(["a"])
    with pytest.raises(TypeError):
        host.key_bytes(b"abc")


def test_load_result_is_a_list_of_bools() -> None:
    r = kvstrata.LoadResult([True, True, False, True], [1, 2, None, 4])
    assert r == [True, True, False, True] and not all(r)
    assert (r.hit_blocks, r.leading_hits, r.blocks[2]) == (3, 2, None)


# ---------------------------------------------------------------------- store/load on a fake client


class FakeClient:
    """Records host-mode calls; slots are laid out back to back in the fake region."""

    def __init__(self, fd_socket: str, session_id: int, block: int, states) -> None:
        self.timeout = 5.0
        self.endpoint = SimpleNamespace(target="fake")
        self.fd_socket, self.sid, self.block, self.states = fd_socket, session_id, block, states
        self.calls: List[tuple] = []

    def open_session(self, **kw):
        return pb.OpenSessionResponse(session_id=self.sid, heartbeat_timeout_ms=0,
                                      shm_region_bytes=REGION_BYTES, shm_fd_socket=self.fd_socket)

    def close_session(self, **kw):
        self.calls.append(("close",))

    def _slots(self, keys):
        return [pb.SlotRef(state=st, offset=i * self.block, length=self.block)
                for i, st in zip(range(len(keys)), self.states)]

    def reserve_store(self, **kw):
        self.calls.append(("reserve", len(kw["keys"])))
        return pb.ReserveStoreResponse(reservation_id=11, slots=self._slots(kw["keys"]))

    def commit_store(self, **kw):
        self.calls.append(("abort" if kw.get("abort") else "commit", kw["reservation_id"]))
        return pb.CommitStoreResponse(committed_blocks=sum(
            1 for s in self.states if s == pb.SlotRef.STATE_RESERVED))

    def acquire_load(self, **kw):
        self.calls.append(("acquire", len(kw["keys"]), kw["lease_id"]))
        return pb.AcquireLoadResponse(load_id=21, slots=self._slots(kw["keys"]))

    def release_load(self, **kw):
        self.calls.append(("release", kw["load_id"]))


def fake_session(srv: FakeFdServer, states, block: int = N):
    client = FakeClient(str(srv.path), srv.session_id, block, states)
    ns = kvstrata.RegisteredNamespace(3, "f" * 32, block)
    return kvstrata.Session(client), client, ns


def test_store_copies_reserved_slots_then_commits(fd_server) -> None:
    R, P, D = pb.SlotRef.STATE_RESERVED, pb.SlotRef.STATE_ALREADY_PRESENT, pb.SlotRef.STATE_DROPPED
    srv = fd_server()
    s, client, ns = fake_session(srv, [R, P, R, D])
    blocks = [bytes([i]) * N for i in range(4)]
    result = s.store(ns, [b"a", b"b", b"c", b"d"], blocks)
    assert result == kvstrata.StoreResult(stored=2, already_present=1, dropped=1)
    assert client.calls == [("reserve", 4), ("commit", 11)]
    assert os.pread(srv.fd, N, 0) == blocks[0] and os.pread(srv.fd, N, 2 * N) == blocks[2]
    assert os.pread(srv.fd, N, N) == b"\0" * N, "ALREADY_PRESENT slots are not written"
    s.close()
    assert s._host._region is None


def test_store_validates_before_any_call(fd_server) -> None:
    srv = fd_server()
    s, client, ns = fake_session(srv, [pb.SlotRef.STATE_RESERVED] * 2)
    with pytest.raises(ValueError, match=r"blocks\[1\]"):
        s.store(ns, [b"a", b"b"], [b"\0" * N, b"\0" * (N + 1)])
    with pytest.raises(ValueError, match="2 keys but 1 blocks"):
        s.store(ns, [b"a", b"b"], [b"\0" * N])
    with pytest.raises(TypeError, match="RegisteredNamespace"):
        s.store(ns.namespace_id, [b"a"], [b"\0" * N])
    assert client.calls == []
    s.close()


def test_store_aborts_when_the_copy_fails(fd_server, monkeypatch) -> None:
    srv = fd_server()
    s, client, ns = fake_session(srv, [pb.SlotRef.STATE_RESERVED] * 3)
    copied = []

    def flaky(self, src, offset, length):
        if len(copied) == 1:
            raise MemoryError("boom")
        copied.append(offset)

    monkeypatch.setattr(host.RegionCopier, "to_slot", flaky)
    with pytest.raises(MemoryError):
        s.store(ns, [b"a", b"b", b"c"], [b"\0" * N] * 3)
    assert client.calls == [("reserve", 3), ("abort", 11)]
    s.close()


def test_load_copies_ready_slots_before_release(fd_server, monkeypatch) -> None:
    Y, M = pb.SlotRef.STATE_READY, pb.SlotRef.STATE_MISSING
    srv = fd_server()
    for i in range(3):
        os.pwrite(srv.fd, bytes([10 + i]) * N, i * N)
    s, client, ns = fake_session(srv, [Y, M, Y])
    out = [bytearray(N), np.zeros(N, np.uint8), np.zeros((2, N // 2), np.uint8)]
    released_after_copy = []
    real_release = client.release_load

    def release(**kw):
        released_after_copy.append(bytes(out[2].reshape(-1)[:1]))
        real_release(**kw)

    client.release_load = release
    r = s.load(ns, [b"a", b"b", b"c"], out=out, lease_id=5)
    assert r == [True, False, True]
    assert released_after_copy == [bytes([12])], "bytes must be copied before ReleaseLoad"
    assert out[0] == bytes([10]) * N and not out[1].any() and (out[2] == 12).all()
    assert r.blocks[0] is out[0] and r.blocks[1] is None
    assert client.calls == [("acquire", 3, 5), ("release", 21)]
    r2 = s.load(ns, [b"a", b"b"])  # New numpy arrays.
    assert r2 == [True, False] and isinstance(r2.blocks[0], np.ndarray)
    assert r2.blocks[0].dtype == np.uint8 and (r2.blocks[0] == 10).all()
    s.close()


def test_load_releases_when_the_copy_fails(fd_server, monkeypatch) -> None:
    srv = fd_server()
    s, client, ns = fake_session(srv, [pb.SlotRef.STATE_READY] * 2)

    def boom(self, dst, offset, length):
        raise RuntimeError("copy failed")

    monkeypatch.setattr(host.RegionCopier, "from_slot", boom)
    with pytest.raises(RuntimeError, match="copy failed"):
        s.load(ns, [b"a", b"b"])
    assert client.calls == [("acquire", 2, 0), ("release", 21)]
    with pytest.raises(ValueError, match=r"out\[0\]"):
        s.load(ns, [b"a"], out=[bytearray(N - 1)])
    assert client.calls == [("acquire", 2, 0), ("release", 21)]
    s.close()


def test_load_rejects_a_wrong_slot_length(fd_server) -> None:
    srv = fd_server()
    s, client, ns = fake_session(srv, [pb.SlotRef.STATE_READY], block=N)
    client.block = N // 2  # The daemon answers a slot of another size.
    with pytest.raises(kvstrata.KVStrataError) as exc:
        s.load(ns, [b"a"])
    assert exc.value.code == grpc.StatusCode.INTERNAL
    assert client.calls[-1] == ("release", 21)
    s.close()
