"""GPU-mode client logic without a GPU, torch or daemon: pieces (kvstrata.tensor_pieces)
described for CUDA IPC (kvstrata.describe_pieces) on fake tensor-like objects, block
transfers, handle parsing, the completion tracker and the Session's GPU calls against a
fake client. Runs anywhere (also where the GPU tests skip). The engines' layouts are tested
with their connectors (tests/e2e/vllm/test_kv_layouts.py, tests/integration/sglang/
test_device_pool.py).
"""
from __future__ import annotations

import subprocess
import sys
import threading
import time
from typing import Dict, List

import grpc
import pytest

import kvstrata
from kvstrata import cuda as kcuda
from kvstrata import pb
from kvstrata.jobs import CompletionTracker

from fake_cuda import (ALLOC_BASE, BF16, BLOCK, PIECE, UUID, D, FakeDevice, FakeExporter,
                       FakeTensor, H, L, T, describe, per_layer)


def kv_first(layers: List[FakeTensor]) -> List[kvstrata.TensorPiece]:
    """Per-layer [2, N, ...] tensors (K/V dim 0, blocks dim 1) as pieces, layer by layer."""
    return [p for i, t in enumerate(layers)
            for p in kvstrata.tensor_pieces(t, block_dim=1, kv_dim=0, layer=i, what=f"layer {i}")]


# ---------------------------------------------------------------------- pieces


def test_tensor_pieces_kv_split_and_adjacent():
    n = 100
    t = FakeTensor([2, n, T, H, D], ALLOC_BASE)
    k, v = kvstrata.tensor_pieces(t, block_dim=1, kv_dim=0, layer=3, what="t")
    assert (k.layer, k.kv_index, v.layer, v.kv_index) == (3, 0, 3, 1)
    assert k.ptr == ALLOC_BASE and v.ptr == ALLOC_BASE + n * PIECE
    assert k.piece_bytes == k.block_stride == PIECE and k.num_blocks == n
    assert k.tensor is t and k.what == "t[K]"
    # K and V of a block adjacent in memory ([N, 2, ...]): one piece of both.
    (kv,) = kvstrata.tensor_pieces(FakeTensor([n, 2, T, H, D], ALLOC_BASE), block_dim=0,
                                   kv_dim=1, kv_index=1)
    assert (kv.piece_bytes, kv.block_stride, kv.kv_index) == (2 * PIECE, 2 * PIECE, 0)


def test_tensor_pieces_outermost_block_dim_and_rows():
    t = FakeTensor([64, L, 2, T, H, D], ALLOC_BASE)
    (p,) = kvstrata.tensor_pieces(t.permute(1, 2, 0, 3, 4, 5))   # blocks: the largest stride
    assert (p.num_blocks, p.piece_bytes, p.block_stride) == (64, BLOCK, BLOCK)
    # Token-major [tokens, heads, dim], 16 tokens per block.
    (q,) = kvstrata.tensor_pieces(FakeTensor([16 * 10, H, D], ALLOC_BASE), block_dim=0,
                                  rows_per_block=16, layer=2, kv_index=1)
    assert (q.num_blocks, q.piece_bytes, q.block_stride, q.layer, q.kv_index) == \
        (10, PIECE, PIECE, 2, 1)
    with pytest.raises(ValueError, match="multiple"):
        kvstrata.tensor_pieces(FakeTensor([100, H, D], ALLOC_BASE), block_dim=0, rows_per_block=16)
    with pytest.raises(ValueError, match="rows_per_block"):
        kvstrata.tensor_pieces(t, rows_per_block=0)
    with pytest.raises(ValueError, match="kv_dim"):
        kvstrata.tensor_pieces(t, block_dim=0, kv_dim=1)        # size 32, not 2
    with pytest.raises(ValueError, match="out of range"):
        kvstrata.tensor_pieces(t, block_dim=6)
    with pytest.raises(TypeError):
        kvstrata.tensor_pieces(object())


def test_describe_takes_pieces():
    with pytest.raises(TypeError, match="TensorPiece"):
        describe({"model.layers.0.attn": FakeTensor([2, 8, T, H, D], ALLOC_BASE)})
    with pytest.raises(ValueError, match="no tensors"):
        describe([])
    desc = describe(kvstrata.tensor_pieces(FakeTensor([2, 8, T, H, D], ALLOC_BASE),
                                           block_dim=1, kv_dim=0))
    assert desc.num_blocks == 8 and [p.kv_index for p in desc.pieces] == [0, 1]
    with pytest.raises(ValueError, match="64"):
        desc.to_proto([b"short"])


def test_adjacent_pieces_are_merged():
    # Per-layer views into one cross-layer buffer [N, L, 2, ...]: every layer's K and V
    # and the next layer's K are adjacent within a block -> one piece of 2 MiB.
    n = 16
    whole = FakeTensor([n, L, 2, T, H, D], ALLOC_BASE)
    st = whole.stride()
    layers = [FakeTensor([2, n, T, H, D], ALLOC_BASE + l * st[1] * BF16,
                         strides=[st[2], st[0], st[3], st[4], st[5]]) for l in range(L)]
    exp = FakeExporter(single=(ALLOC_BASE, whole.nbytes()))
    desc = describe(kv_first(layers), block_bytes=BLOCK, exporter=exp)
    assert len(desc.pieces) == 1 and desc.pieces[0].piece_bytes == BLOCK
    assert exp.calls == 1  # one allocation, exported once
    unmerged = describe(kv_first(layers), block_bytes=BLOCK, merge_adjacent=False,
                        exporter=FakeExporter(single=(ALLOC_BASE, whole.nbytes())))
    assert len(unmerged.pieces) == L  # K and V of a layer are one piece already


# ---------------------------------------------------------------------- refusals


def test_block_bytes_mismatch_explains():
    layers = per_layer(lambda n, p: FakeTensor([2, n, T, H, D], p), 8)
    with pytest.raises(ValueError, match="bytes_per_block"):
        describe(kv_first(layers), block_bytes=BLOCK // 2)


def test_non_contiguous_block_is_refused():
    # Half of the head dim: a block's elements are no longer one dense range.
    layers = per_layer(lambda n, p: FakeTensor([2, n, T, H, D // 2], p,
                                               strides=[n * T * H * D, T * H * D, H * D, D, 1]), 8)
    with pytest.raises(ValueError, match="not contiguous"):
        describe(kv_first(layers))


def test_devices_must_agree_and_be_cuda():
    layers = per_layer(lambda n, p: FakeTensor([2, n, T, H, D], p), 8)
    layers[3].device = FakeDevice("cuda", 1)
    with pytest.raises(ValueError, match="one device"):
        describe(kv_first(layers))
    layers[3].device = FakeDevice("cpu", None)
    with pytest.raises(ValueError, match="CUDA"):
        describe(kv_first(layers))


def test_block_counts_must_agree():
    layers = per_layer(lambda n, p: FakeTensor([2, n, T, H, D], p), 8)
    layers[5] = FakeTensor([2, 9, T, H, D], layers[5].data_ptr())
    with pytest.raises(ValueError, match="number of blocks"):
        describe(kv_first(layers))


def test_allocation_must_hold_every_block():
    layers = per_layer(lambda n, p: FakeTensor([2, n, T, H, D], p), 8)
    with pytest.raises(ValueError, match="not inside"):
        describe(kv_first(layers), exporter=FakeExporter(slack=-PIECE))


# ---------------------------------------------------------------------- helpers


def test_block_transfers():
    keys = [b"a" * 32, b"b" * 32]
    out = kcuda.block_transfers(keys, [3, 4], 8)
    assert [(m.key, m.block_id) for m in out] == [(keys[0], 3), (keys[1], 4)]
    with pytest.raises(ValueError, match="out of range"):
        kcuda.block_transfers(keys, [3, 8], 8)
    with pytest.raises(ValueError, match="2 keys but 1"):
        kcuda.block_transfers(keys, [3], 8)
    with pytest.raises(TypeError):
        kcuda.block_transfers(keys, [3, "4"], 8)

    class Ids:  # numpy / torch: .tolist()
        def tolist(self):
            return [1, 2]

    assert [m.block_id for m in kcuda.block_transfers(keys, Ids(), None)] == [1, 2]


def test_torch_ipc_handle_formats():
    raw = bytes(range(64))
    assert kcuda.normalize_torch_ipc_handle(raw) == raw
    assert kcuda.normalize_torch_ipc_handle(b"\x02c" + raw) == raw
    assert kcuda.normalize_torch_ipc_handle(b"\x03c" + raw) == raw
    with pytest.raises(ValueError, match="expandable"):
        kcuda.normalize_torch_ipc_handle(b"\x02e" + b"\0" * 100)
    with pytest.raises(ValueError, match="unrecognized"):
        kcuda.normalize_torch_ipc_handle(b"\x02z" + raw)


def test_format_gpu_uuid():
    raw = bytes.fromhex("0123456789abcdef0123456789abcdef")
    assert kcuda.format_gpu_uuid(raw) == UUID
    with pytest.raises(ValueError):
        kcuda.format_gpu_uuid(b"\0" * 15)


def test_imports_without_torch():
    code = ("import sys; sys.modules['torch'] = None\n"
            "import kvstrata, kvstrata.cuda, kvstrata.jobs\n"
            "assert kvstrata.describe_pieces and kvstrata.tensor_pieces and kvstrata.IpcEventPool\n"
            "try:\n    kvstrata.gpu_uuid(0)\nexcept ImportError:\n    print('no-torch-ok')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "no-torch-ok" in r.stdout, r.stderr


# ---------------------------------------------------------------------- completions


class FakeStream:
    def __init__(self) -> None:
        self.items: List = []
        self.cond = threading.Condition()
        self.cancelled = False

    def push(self, c) -> None:
        with self.cond:
            self.items.append(c)
            self.cond.notify_all()

    def __iter__(self):
        return self

    def __next__(self):
        with self.cond:
            while not self.items and not self.cancelled:
                self.cond.wait(0.05)
            if self.cancelled:
                raise StopIteration
            return self.items.pop(0)

    def cancel(self) -> None:
        with self.cond:
            self.cancelled = True
            self.cond.notify_all()


class FakeClient:
    """The RPCs Session / CompletionTracker use, answered in memory."""

    def __init__(self, watch: str = "ok") -> None:
        self.watch = watch            # "ok", or "unimplemented"
        self.stream = FakeStream()
        self.polled: List = []        # completions the next poll answers
        self.calls: Dict[str, List] = {}
        self.next_job = 100
        self.timeout = 5.0
        self.endpoint = type("E", (), {"target": "fake"})()

    def _record(self, name, fields):
        self.calls.setdefault(name, []).append(fields)

    def open_session(self, **f):
        self._record("open_session", f)
        return pb.OpenSessionResponse(session_id=7, heartbeat_timeout_ms=0)

    def close_session(self, **f):
        self._record("close_session", f)
        return pb.CloseSessionResponse()

    def close(self):
        pass

    def watch_completions(self, **f):
        self._record("watch_completions", f)
        if self.watch == "unimplemented":
            raise kvstrata.KVStrataError(grpc.StatusCode.UNIMPLEMENTED, "no GPU jobs")
        return self.stream

    def poll_completions(self, **f):
        self._record("poll_completions", f)
        out, self.polled = self.polled, []
        return pb.PollCompletionsResponse(completions=out)

    def register_kv_memory(self, **f):
        self._record("register_kv_memory", f)
        return pb.RegisterKvMemoryResponse(registration_id=42)

    def unregister_kv_memory(self, **f):
        self._record("unregister_kv_memory", f)
        return pb.UnregisterKvMemoryResponse()

    def _job(self, name, f):
        self._record(name, f)
        self.next_job += 1
        return pb.SubmitJobResponse(job_id=self.next_job)

    def submit_store(self, **f):
        return self._job("submit_store", f)

    def submit_load(self, **f):
        return self._job("submit_load", f)


def completion(job_id, ok=True, failed=()):
    return pb.JobCompletion(job_id=job_id, kind=pb.JobCompletion.KIND_LOAD, ok=ok,
                            failed_blocks=list(failed))


def test_tracker_stream_wait_take_and_dedup():
    fc = FakeClient()
    tr = CompletionTracker(fc, 7)
    tr.start()
    assert tr.watching
    threading.Timer(0.05, fc.stream.push, [completion(1)]).start()
    threading.Timer(0.1, fc.stream.push, [completion(2, False, [3])]).start()
    got = tr.wait([1, 2], timeout=5)
    assert sorted(got) == [1, 2] and list(got[2].failed_blocks) == [3]
    fc.stream.push(completion(1))           # delivered twice (stream and poll): dropped
    fc.polled = [completion(2), completion(3)]
    assert [c.job_id for c in tr.poll()] == [3]
    fc.stream.push(completion(4))
    assert wait_for(lambda: tr.done(4))
    assert list(tr.take()) == [4] and tr.take() == {}
    with pytest.raises(TimeoutError, match="99"):
        tr.wait([99], timeout=0.1)
    tr.close()
    assert not tr.watching


def test_tracker_polls_when_the_stream_is_unavailable():
    fc = FakeClient(watch="unimplemented")
    tr = CompletionTracker(fc, 7)
    tr.start()
    assert not tr.watching and tr.watch_error is not None
    threading.Timer(0.05, lambda: setattr(fc, "polled", [completion(5)])).start()
    t0 = time.monotonic()
    assert list(tr.wait([5], timeout=5)) == [5]
    assert time.monotonic() - t0 < 1.0
    assert len(fc.calls["poll_completions"]) >= 2


def test_tracker_poll_safety_net_with_a_silent_stream():
    fc = FakeClient()
    tr = CompletionTracker(fc, 7, poll_interval=0.05)
    tr.start()
    fc.polled = [completion(6)]             # never on the stream: found by the periodic poll
    assert list(tr.wait([6], timeout=5)) == [6]
    tr.close()


def wait_for(pred, timeout=5.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.01)
    return pred()


def test_session_gpu_calls_with_a_fake_client():
    fc = FakeClient()
    s = kvstrata.Session(fc)
    ns = kvstrata.RegisteredNamespace(3, "f" * 32, BLOCK)
    layers = per_layer(lambda n, p: FakeTensor([2, n, T, H, D], p), 8)
    desc = describe(kv_first(layers), block_bytes=BLOCK)
    reg = s.register_cuda_kv_caches(ns, desc, num_events=0)
    assert reg.registration_id == 42 and int(reg) == 42 and reg.num_blocks == 8
    sent = fc.calls["register_kv_memory"][0]
    assert sent["namespace_id"] == 3 and len(sent["cuda"].tensors) == 2 * L
    assert "watch_completions" in fc.calls   # the stream opens before any job exists

    with pytest.raises(ValueError, match="bytes_per_block"):
        s.register_cuda_kv_caches(kvstrata.RegisteredNamespace(3, "f" * 32, BLOCK - 1), desc,
                                  num_events=0)
    keys = [bytes([i]) * 32 for i in range(3)]
    job = s.submit_store(ns, reg, keys, [0, 1, 2])
    req = fc.calls["submit_store"][-1]
    assert req["wait_event"] == 0 and req["registration_id"] == 42
    assert [b.block_id for b in req["blocks"]] == [0, 1, 2]
    with pytest.raises(ValueError, match="out of range"):
        s.submit_store(ns, reg, keys, [0, 1, 8])
    with pytest.raises(ValueError, match="owns the events|no IPC events"):
        s.submit_store(ns, reg, keys, [0, 1, 2], event=True)
    with pytest.raises(TypeError):
        s.submit_store(ns, reg, ["a", "b", "c"], [0, 1, 2])
    load = s.submit_load(ns, 42, keys, [5, 6, 7], lease_id=9)
    assert fc.calls["submit_load"][-1]["lease_id"] == 9
    fc.stream.push(completion(job))
    fc.stream.push(completion(load, False, [1]))
    done = s.wait_jobs([job, load], timeout=5)
    assert done[job].ok and list(done[load].failed_blocks) == [1]
    s.unregister_cuda_kv_caches(reg)
    assert reg.unregistered and s.cuda_registration(42) is None
    s.close()
    assert fc.stream.cancelled and "close_session" in fc.calls
