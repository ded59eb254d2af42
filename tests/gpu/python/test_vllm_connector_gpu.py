"""kvstrata_vllm's CUDA path on a real GPU: the connector's worker side (WorkerSide, what
KVStrataConnector runs in each vLLM worker) registers vLLM-layout CUDA KV caches through
CUDA IPC, stores blocks with an IPC event recorded after the "forward pass", reports the
finished request for a delayed free, and a second worker (a restarted vLLM) loads them into
other blocks, byte-exact; a missing unit is reported as a load error.

vLLM is not needed (the GPU machine has no network): the connector package is imported from
connector_vllm/ and the vLLM config objects it reads are stand-ins with the same fields.
The scheduler side and the host path run against real vLLM in tests/e2e/vllm.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from gpu_support import require_gpu

require_gpu()

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "connector_vllm"))
from kvstrata_vllm.config import parse_config  # noqa: E402
from kvstrata_vllm.metadata import KVStrataMetadata, RequestTransfer, UnitTransfer  # noqa: E402
from kvstrata_vllm.worker import WorkerSide  # noqa: E402

LAYERS, HEADS, HEAD, BLOCK, NUM_BLOCKS = 4, 8, 128, 16, 64


def configs(salt: str):
    spec = SimpleNamespace(block_size=BLOCK, num_kv_heads=HEADS, head_size=HEAD,
                           dtype=torch.bfloat16, page_size_bytes=2 * BLOCK * HEADS * HEAD * 2)
    kvc = SimpleNamespace(kv_cache_groups=[SimpleNamespace(
        kv_cache_spec=spec, layer_names=[f"model.layers.{i}.attn" for i in range(LAYERS)])])
    vc = SimpleNamespace(parallel_config=SimpleNamespace(tensor_parallel_size=1),
                         model_config=SimpleNamespace(model=f"gpu-test-{salt}"),
                         cache_config=SimpleNamespace(kv_cache_layout="LBNHC",
                                                      prefix_match_unit=None),
                         kv_events_config=None)
    return vc, kvc


def kv_caches(fill: bool):
    make = torch.randn if fill else torch.zeros
    return {f"model.layers.{i}.attn": make(2, NUM_BLOCKS, BLOCK, HEADS, HEAD, device="cuda",
                                           dtype=torch.bfloat16) for i in range(LAYERS)}


def worker(gpu_daemon, salt, fill):
    vc, kvc = configs(salt)
    w = WorkerSide(vc, kvc, parse_config({"endpoint": gpu_daemon.endpoint}))
    caches = kv_caches(fill)
    w.register(caches)
    assert w.mode == "cuda" and w.io.reg is not None, w._disabled_reason
    return w, caches


def wait_finished(w, kind: str, req_id: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sent, recved = w.get_finished(set())
        if req_id in ((sent if kind == "sent" else recved) or ()):
            return
        time.sleep(0.01)
    raise AssertionError(f"{req_id} not reported {kind} within {timeout}s")


SRC_BLOCKS = [3, 9, 10, 11, 40, 63]


def stored_worker(gpu_daemon, salt, prefix: str):
    """A worker with random KV that stored SRC_BLOCKS as six units: (worker, its KV, keys)."""
    src, src_kv = worker(gpu_daemon, salt, fill=True)
    keys = [f"{salt}-{prefix}-{i}".encode()[:32] for i in range(6)]
    store = KVStrataMetadata(
        stores=[RequestTransfer("r1", [UnitTransfer(k, [b]) for k, b in zip(keys, SRC_BLOCKS)])],
        delayed_frees={"r1"})
    src.start_load(store)  # every step's first hook (vLLM's start_load_kv): takes the frees
    src.save(store)   # records the IPC event on the current stream: after this "forward"
    wait_finished(src, "sent", "r1")
    return src, src_kv, keys


def test_store_then_load_in_another_worker(gpu_daemon, salt):
    src, src_kv, keys = stored_worker(gpu_daemon, salt, "unit")
    src_blocks = SRC_BLOCKS
    stats = src.stats.take()
    assert stats is not None and stats.data.get("stored_units") == 6, stats

    dst, dst_kv = worker(gpu_daemon, salt, fill=False)
    dst_blocks = [1, 2, 5, 7, 8, 30]
    missing_block = 31
    load = KVStrataMetadata(loads=[RequestTransfer("r2", [
        UnitTransfer(k, [b]) for k, b in zip(keys, dst_blocks)] + [
        UnitTransfer(f"{salt}-never".encode(), [missing_block])])])
    dst.start_load(load)
    wait_finished(dst, "recved", "r2")
    assert dst.take_invalid() == {missing_block}
    torch.cuda.synchronize()
    for name in src_kv:
        for s, d in zip(src_blocks, dst_blocks):
            assert torch.equal(src_kv[name][:, s], dst_kv[name][:, d]), (name, s, d)
        assert not dst_kv[name][:, missing_block].any()
    src.shutdown()
    dst.shutdown()


def test_a_step_without_forward_pass_reports_its_load(gpu_daemon, salt):
    """KVStrataMetadata.idle_wait_ms (the engine runs nothing else): get_finished waits for
    the asynchronous load it submitted, so the same step reports it finished receiving, and
    the request's load time (the daemon's) goes to the planner once."""
    src, src_kv, keys = stored_worker(gpu_daemon, salt, "idle")
    dst, dst_kv = worker(gpu_daemon, salt, fill=False)
    dst_blocks = [1, 2, 5, 7, 8, 30]
    load = KVStrataMetadata(loads=[RequestTransfer("r2", [
        UnitTransfer(k, [b]) for k, b in zip(keys, dst_blocks)])], idle_wait_ms=5000.0)
    dst.start_load(load)
    sent, recved = dst.get_finished(set())
    assert recved == {"r2"}
    assert not dst.take_invalid()
    meta = dst.worker_meta()
    assert meta is not None and [ids for ids, _ in meta.loads] == [("r2",)], meta
    torch.cuda.synchronize()
    for name in src_kv:
        for s, d in zip(SRC_BLOCKS, dst_blocks):
            assert torch.equal(src_kv[name][:, s], dst_kv[name][:, d]), (name, s, d)
    src.shutdown()
    dst.shutdown()


def test_layer_wise_load_in_the_step(gpu_daemon, salt):
    """A same-step load (RequestTransfer.sync): one layer-wise job; after wait_layer for every
    layer, work on the current stream reads the loaded blocks without any CPU wait; the
    missing unit's block is invalid in the same step's get_finished. A step whose forward
    pass skipped a layer's hook counts the whole job as failed (recompute)."""
    src, src_kv, keys = stored_worker(gpu_daemon, salt, "lw")
    src_blocks = SRC_BLOCKS

    dst, dst_kv = worker(gpu_daemon, salt, fill=False)
    dst_blocks = [1, 2, 5, 7, 8, 30]
    load = KVStrataMetadata(loads=[RequestTransfer("r2", [
        UnitTransfer(k, [b]) for k, b in zip(keys, dst_blocks)] + [
        UnitTransfer(f"{salt}-never".encode(), [31])], sync=True)])
    dst.start_load(load)
    same = []
    for name in dst_kv:  # the forward pass, layer by layer (no synchronize in between)
        dst.wait_layer(name)
        same.append(all(torch.equal(src_kv[name][:, s], dst_kv[name][:, d])
                        for s, d in zip(src_blocks, dst_blocks)))
    sent, recved = dst.get_finished(set())
    assert not recved                      # a same-step load is never "finished receiving"
    assert dst.take_invalid() == {31}
    assert all(same), [n for n, ok in zip(dst_kv, same) if not ok]

    names = list(dst_kv)
    dst.start_load(load)
    for name in names[:-1]:                # the last layer's hook never runs
        dst.wait_layer(name)
    dst.get_finished(set())
    assert dst.take_invalid() == set(dst_blocks) | {31}
    src.shutdown()
    dst.shutdown()


def test_preempted_request_stores_finish_before_reuse(gpu_daemon, salt):
    w, _ = worker(gpu_daemon, salt, fill=True)
    keys = [f"{salt}-p-{i}".encode()[:32] for i in range(8)]
    w.save(KVStrataMetadata(stores=[RequestTransfer("r1", [UnitTransfer(k, [i])
                                                          for i, k in enumerate(keys)])]))
    w.handle_preemptions(KVStrataMetadata(preempted={"r1"}))
    assert not w.io.busy_locked("store", "r1")       # waited for: the blocks may be reused
    w.shutdown()


def test_units_of_several_blocks_are_refused_on_cuda(gpu_daemon, salt):
    vc, kvc = configs(salt)
    w = WorkerSide(vc, kvc, parse_config({"endpoint": gpu_daemon.endpoint,
                                          "tokens_per_unit": 32}))
    w.register(kv_caches(False))
    assert w.mode is None and "tokens_per_unit=32" in w._disabled_reason
    w.start_load(KVStrataMetadata(loads=[RequestTransfer("r", [UnitTransfer(b"k", [1, 2])])]))
    assert w.take_invalid() == {1, 2}                 # a disabled worker recomputes
    w.shutdown()


@pytest.fixture
def salt(salt):  # noqa: F811 - the conftest's salt, as a short key prefix
    return salt[-12:]
