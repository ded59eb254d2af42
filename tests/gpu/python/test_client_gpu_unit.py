"""GPU-mode client logic without a GPU, torch or daemon: describe_kv_caches on fake
tensor-like objects, block transfers, handle parsing, the completion tracker and the
Session's GPU calls against a fake client. Runs anywhere (also where the GPU tests skip).
"""
from __future__ import annotations

import math
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple

import grpc
import pytest

import kvstrata
from kvstrata import cuda as kcuda
from kvstrata import pb
from kvstrata.jobs import CompletionTracker

L, H, D, T = 32, 8, 128, 16           # Llama-3.1-8B geometry, vLLM block of 16 tokens
BF16 = 2
PIECE = T * H * D * BF16              # 32 KiB: one layer's K (or V) of one block
BLOCK = 2 * L * PIECE                 # 2 MiB
ALLOC_BASE = 0x7F0000000000
UUID = "GPU-01234567-89ab-cdef-0123-456789abcdef"


@dataclass
class FakeDevice:
    type: str = "cuda"
    index: int = 0

    def __str__(self) -> str:
        return f"{self.type}:{self.index}"


class FakeTensor:
    """Just enough of torch.Tensor: shape, stride(), element_size(), data_ptr(), device."""

    def __init__(self, shape: Sequence[int], ptr: int, itemsize: int = BF16,
                 strides: Sequence[int] = None, device: FakeDevice = None) -> None:
        self.shape = tuple(shape)
        if strides is None:
            strides, acc = [], 1
            for n in reversed(self.shape):
                strides.insert(0, acc)
                acc *= n
        self._strides = tuple(strides)
        self._ptr = ptr
        self._itemsize = itemsize
        self.device = device or FakeDevice()

    def stride(self) -> Tuple[int, ...]:
        return self._strides

    def element_size(self) -> int:
        return self._itemsize

    def data_ptr(self) -> int:
        return self._ptr

    def nbytes(self) -> int:
        return math.prod(self.shape) * self._itemsize

    def permute(self, *order: int) -> "FakeTensor":
        return FakeTensor([self.shape[i] for i in order], self._ptr, self._itemsize,
                          [self._strides[i] for i in order], self.device)


class FakeExporter:
    """Every tensor lives in its own allocation, or all in one when `single` is set."""

    def __init__(self, single: Tuple[int, int] = None, slack: int = 0) -> None:
        self.single = single
        self.slack = slack
        self.calls = 0

    def __call__(self, t: FakeTensor) -> kcuda.IpcAllocation:
        self.calls += 1
        if self.single is not None:
            base, size = self.single
        else:
            base, size = t.data_ptr(), t.nbytes() + self.slack
        return kcuda.IpcAllocation(base.to_bytes(8, "little") * 8, base, size, "fake")


def per_layer(shape_fn, n_blocks: int, gap: int = 1 << 20) -> List[FakeTensor]:
    """L tensors of shape_fn(n_blocks), each in its own address range."""
    out, ptr = [], ALLOC_BASE
    for _ in range(L):
        t = shape_fn(n_blocks, ptr)
        out.append(t)
        ptr += t.nbytes() + gap
    return out


def describe(kv, layout="vllm", block_bytes=None, exporter=None, **kw):
    return kvstrata.describe_kv_caches(kv, layout, block_bytes, exporter=exporter or FakeExporter(),
                                       gpu_uuid=UUID, **kw)


# ---------------------------------------------------------------------- vLLM layouts


def test_flash_attention_nhd_two_pieces_per_layer():
    n = 100
    layers = per_layer(lambda n, p: FakeTensor([2, n, T, H, D], p), n)
    desc = describe({f"model.layers.{i}.self_attn.attn": t for i, t in enumerate(layers)},
                    block_bytes=BLOCK)
    assert desc.num_blocks == n and desc.block_bytes == BLOCK and desc.gpu_uuid == UUID
    assert len(desc.pieces) == 2 * L
    for i, p in enumerate(desc.pieces):
        assert (p.layer, p.kv_index) == (i // 2, i % 2)
        assert p.piece_bytes == PIECE and p.block_stride == PIECE
        assert p.base_offset == (0 if p.kv_index == 0 else n * PIECE)
        assert p.allocation_bytes == 2 * n * PIECE
        assert p.ipc_handle == layers[p.layer].data_ptr().to_bytes(8, "little") * 8
    proto = desc.to_proto([b"e" * 64, b"f" * 64])
    assert proto.num_blocks == n and len(proto.tensors) == 2 * L and len(proto.ipc_events) == 2
    assert proto.tensors[1].kv_index == 1 and proto.tensors[1].base_offset == n * PIECE
    assert proto.gpu_uuid == UUID


def test_dict_is_ordered_by_layer_number():
    layers = per_layer(lambda n, p: FakeTensor([2, n, T, H, D], p), 8)
    kv = {f"model.layers.{i}.attn": layers[i] for i in (10, 2, 31, 0, 1, 3, 4, 5, 6, 7, 8, 9, 11,
                                                           12, 13, 14, 15, 16, 17, 18, 19, 20, 21,
                                                           22, 23, 24, 25, 26, 27, 28, 29, 30)}
    desc = describe(kv, block_bytes=BLOCK)
    handles = [p.ipc_handle for p in desc.pieces[::2]]
    assert handles == [t.data_ptr().to_bytes(8, "little") * 8 for t in layers]


def test_hnd_permuted_view_is_dense_per_block():
    # vLLM's HND stride order: physical [2, N, heads, tokens, dim], logical [2, N, tokens, heads, dim].
    layers = per_layer(lambda n, p: FakeTensor([2, n, H, T, D], p).permute(0, 1, 3, 2, 4), 50)
    assert layers[0].shape == (2, 50, T, H, D)
    desc = describe(layers, "vllm_hnd", BLOCK)
    assert len(desc.pieces) == 2 * L and {p.piece_bytes for p in desc.pieces} == {PIECE}


def test_flashinfer_one_piece_per_layer():
    layers = per_layer(lambda n, p: FakeTensor([n, 2, T, H, D], p), 40)
    desc = describe(layers, "vllm_flashinfer", BLOCK)
    assert len(desc.pieces) == L
    assert all(p.piece_bytes == 2 * PIECE == p.block_stride and p.kv_index == 0 for p in desc.pieces)
    assert [p.layer for p in desc.pieces] == list(range(L))


def test_kv_first_logical_over_block_first_physical_is_one_piece():
    # Logical [2, N, ...] whose K and V of a block are adjacent in memory ([N, 2, ...] physical).
    layers = per_layer(lambda n, p: FakeTensor([n, 2, T, H, D], p).permute(1, 0, 2, 3, 4), 20)
    desc = describe(layers, block_bytes=BLOCK)
    assert len(desc.pieces) == L and desc.pieces[0].piece_bytes == 2 * PIECE


def test_mla_three_dim_per_layer():
    layers = per_layer(lambda n, p: FakeTensor([n, T, 576], p), 30)
    desc = describe(layers)
    assert len(desc.pieces) == L and desc.block_bytes == L * T * 576 * BF16


def test_block_dim_override_for_two_blocks():
    # [2, 2, ...]: ambiguous; the default is vLLM's [2, N, ...]; block_dim=0 says [N, 2, ...].
    layers = per_layer(lambda n, p: FakeTensor([2, n, T, H, D], p), 2)
    assert len(describe(layers).pieces) == 2 * L
    assert len(describe(layers, block_dim=0).pieces) == L


def test_cross_layer_tensor():
    n = 64
    t = FakeTensor([n, L, 2, T, H, D], ALLOC_BASE + 4096)
    desc = describe(t, "vllm_cross_layer", BLOCK, exporter=FakeExporter(single=(ALLOC_BASE, 1 << 30)))
    (p,) = desc.pieces
    assert (p.piece_bytes, p.block_stride, p.base_offset) == (BLOCK, BLOCK, 4096)
    # A permuted logical view (layers first) still finds the blocks by their stride.
    view = t.permute(1, 2, 0, 3, 4, 5)
    (q,) = describe(view, "cross_layer", BLOCK,
                    exporter=FakeExporter(single=(ALLOC_BASE, 1 << 30))).pieces
    assert q == p
    with pytest.raises(ValueError, match="one tensor"):
        describe([t, t], "vllm_cross_layer")


def test_adjacent_pieces_are_merged():
    # Per-layer views into one cross-layer buffer [N, L, 2, ...]: every layer's K and V
    # and the next layer's K are adjacent within a block -> one piece of 2 MiB.
    n = 16
    whole = FakeTensor([n, L, 2, T, H, D], ALLOC_BASE)
    st = whole.stride()
    layers = [FakeTensor([2, n, T, H, D], ALLOC_BASE + l * st[1] * BF16,
                         strides=[st[2], st[0], st[3], st[4], st[5]]) for l in range(L)]
    exp = FakeExporter(single=(ALLOC_BASE, whole.nbytes()))
    desc = describe(layers, block_bytes=BLOCK, exporter=exp)
    assert len(desc.pieces) == 1 and desc.pieces[0].piece_bytes == BLOCK
    assert exp.calls == 1  # one allocation, exported once
    unmerged = describe(layers, block_bytes=BLOCK, merge_adjacent=False,
                        exporter=FakeExporter(single=(ALLOC_BASE, whole.nbytes())))
    assert len(unmerged.pieces) == L  # K and V of a layer are one piece already


# ---------------------------------------------------------------------- SGLang


def test_sglang_mha_pages():
    page, rows = 16, 16 * 101
    ptr = [ALLOC_BASE]

    def buf():
        t = FakeTensor([rows, H, D], ptr[0])
        ptr[0] += t.nbytes() + 4096
        return t

    k = [buf() for _ in range(L)]
    v = [buf() for _ in range(L)]
    for kv in ((k, v), {"k": k, "v": v}):
        desc = describe(kv, "sglang", BLOCK, tokens_per_block=page)
        assert desc.num_blocks == 101
        assert [(p.kv_index, p.layer) for p in desc.pieces] == \
            [(0, i) for i in range(L)] + [(1, i) for i in range(L)]
        assert all(p.piece_bytes == p.block_stride == PIECE for p in desc.pieces)
    with pytest.raises(ValueError, match="tokens_per_block"):
        describe((k, v), "sglang")
    with pytest.raises(ValueError, match="multiple"):
        describe((k, v), "sglang", tokens_per_block=64)
    with pytest.raises(ValueError, match="V buffers"):
        describe((k, v[:-1]), "sglang", tokens_per_block=page)


def test_sglang_mla_single_list():
    bufs = per_layer(lambda n, p: FakeTensor([n * 64, 1, 576], p), 10)
    desc = describe(bufs, "sglang_mla", tokens_per_block=64)
    assert desc.num_blocks == 10 and len(desc.pieces) == L
    assert desc.block_bytes == L * 64 * 576 * BF16


# ---------------------------------------------------------------------- refusals


def test_block_bytes_mismatch_explains():
    layers = per_layer(lambda n, p: FakeTensor([2, n, T, H, D], p), 8)
    with pytest.raises(ValueError, match="bytes_per_block"):
        describe(layers, block_bytes=BLOCK // 2)


def test_non_contiguous_block_is_refused():
    # Half of the head dim: a block's elements are no longer one dense range.
    layers = per_layer(lambda n, p: FakeTensor([2, n, T, H, D // 2], p,
                                               strides=[n * T * H * D, T * H * D, H * D, D, 1]), 8)
    with pytest.raises(ValueError, match="not contiguous"):
        describe(layers)


def test_devices_must_agree_and_be_cuda():
    layers = per_layer(lambda n, p: FakeTensor([2, n, T, H, D], p), 8)
    layers[3].device = FakeDevice("cuda", 1)
    with pytest.raises(ValueError, match="one device"):
        describe(layers)
    layers[3].device = FakeDevice("cpu", None)
    with pytest.raises(ValueError, match="CUDA"):
        describe(layers)


def test_block_counts_must_agree():
    layers = per_layer(lambda n, p: FakeTensor([2, n, T, H, D], p), 8)
    layers[5] = FakeTensor([2, 9, T, H, D], layers[5].data_ptr())
    with pytest.raises(ValueError, match="number of blocks"):
        describe(layers)


def test_allocation_must_hold_every_block():
    layers = per_layer(lambda n, p: FakeTensor([2, n, T, H, D], p), 8)
    with pytest.raises(ValueError, match="not inside"):
        describe(layers, exporter=FakeExporter(slack=-PIECE))


def test_bad_arguments():
    t = FakeTensor([2, 8, T, H, D], ALLOC_BASE)
    with pytest.raises(ValueError, match="unknown layout"):
        describe([t], "paged")
    with pytest.raises(TypeError, match="cross_layer"):
        describe(t, "vllm")
    with pytest.raises(TypeError):
        describe([object()])
    with pytest.raises(ValueError, match="no tensors"):
        describe([])
    desc = describe([t])
    with pytest.raises(ValueError, match="64"):
        desc.to_proto([b"short"])


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
            "assert kvstrata.describe_kv_caches and kvstrata.IpcEventPool\n"
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
    desc = describe(layers, block_bytes=BLOCK)
    reg = s.register_cuda_kv_caches(ns, desc, "vllm", num_events=0)
    assert reg.registration_id == 42 and int(reg) == 42 and reg.num_blocks == 8
    sent = fc.calls["register_kv_memory"][0]
    assert sent["namespace_id"] == 3 and len(sent["cuda"].tensors) == 2 * L
    assert "watch_completions" in fc.calls   # the stream opens before any job exists

    with pytest.raises(ValueError, match="bytes_per_block"):
        s.register_cuda_kv_caches(kvstrata.RegisteredNamespace(3, "f" * 32, BLOCK - 1), desc, "vllm",
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
