"""describe_pieces on real CUDA tensors (no daemon): handles, offsets, sizes, uuid; the
pieces of vLLM's layouts (kvstrata_vllm) and of SGLang's device pool (kvstrata_sglang)."""
from __future__ import annotations

import re
import subprocess

import pytest

from gpu_support import BLOCK_BYTES, KvCache, require_gpu

require_gpu()

import torch  # noqa: E402

import kvstrata  # noqa: E402
from kvstrata import cuda as kcuda  # noqa: E402
from kvstrata_sglang.device_pool import device_pool_pieces  # noqa: E402
from kvstrata_vllm.kv_layouts import kv_cache_pieces  # noqa: E402

UUID_RE = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def test_gpu_uuid_matches_the_driver():
    uuid = kvstrata.gpu_uuid(0)
    assert UUID_RE.match(uuid), uuid
    assert kcuda.format_gpu_uuid(kcuda._driver().device_uuid(0)) == uuid
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout.lower()
    except (OSError, subprocess.TimeoutExpired):
        pytest.skip("nvidia-smi not available")
    assert uuid.lower() in smi or uuid.replace("GPU-", "MIG-") in smi, (uuid, smi)


@pytest.mark.parametrize("layout", ["nhd", "hnd", "flashinfer", "cross_layer"])
def test_describe_llama_layouts(layout):
    cache = KvCache(layout, 96)
    desc = kvstrata.describe_pieces(cache.pieces(), BLOCK_BYTES)
    assert desc.block_bytes == BLOCK_BYTES and desc.num_blocks == 96
    assert desc.gpu_uuid == kvstrata.gpu_uuid(0)
    for p in desc.pieces:
        assert len(p.ipc_handle) == 64
        assert p.base_offset + 95 * p.block_stride + p.piece_bytes <= p.allocation_bytes
    tensors = [cache.cross] if layout == "cross_layer" else cache.layers
    # Every piece's address (allocation base + offset) is inside one of the tensors.
    bases = {}
    for t in tensors:
        base, size = kcuda._driver().address_range(0, t.data_ptr())
        assert size >= t.untyped_storage().nbytes()
        bases[t.data_ptr()] = base
    if layout == "nhd":
        for layer, t in enumerate(cache.layers):
            k, v = desc.pieces[2 * layer], desc.pieces[2 * layer + 1]
            assert (k.layer, k.kv_index, v.layer, v.kv_index) == (layer, 0, layer, 1)
            assert bases[t.data_ptr()] + k.base_offset == t.data_ptr()
            assert v.base_offset - k.base_offset == 96 * k.block_stride
            assert k.piece_bytes == k.block_stride == BLOCK_BYTES // 64


def test_torch_exporter_agrees_with_the_driver():
    cache = KvCache("nhd", 32)
    by_driver = kvstrata.describe_pieces(cache.pieces(), BLOCK_BYTES)
    by_torch = kvstrata.describe_pieces(cache.pieces(), BLOCK_BYTES, exporter="torch")
    for a, b in zip(by_driver.pieces, by_torch.pieces):
        assert (a.base_offset, a.allocation_bytes, a.block_stride, a.piece_bytes) == \
               (b.base_offset, b.allocation_bytes, b.block_stride, b.piece_bytes)


def test_sglang_token_major_buffers():
    page, layers, rows = 16, 4, 16 * 33  # 32 pages + SGLang's padding page
    k = [torch.empty(rows, 8, 128, dtype=torch.bfloat16, device="cuda") for _ in range(layers)]
    v = [torch.empty(rows, 8, 128, dtype=torch.bfloat16, device="cuda") for _ in range(layers)]
    desc = kvstrata.describe_pieces(device_pool_pieces((k, v), page))
    assert desc.num_blocks == 33
    assert [(p.kv_index, p.layer) for p in desc.pieces] == \
        [(0, i) for i in range(layers)] + [(1, i) for i in range(layers)]
    assert all(p.piece_bytes == page * 8 * 128 * 2 == p.block_stride for p in desc.pieces)


def test_non_cuda_and_mixed_devices_are_refused():
    with pytest.raises(ValueError, match="CUDA"):
        kvstrata.describe_pieces(kv_cache_pieces([torch.empty(2, 4, 16, 8, 128)], "vllm_nhd"))
    if torch.cuda.device_count() > 1:
        a = torch.empty(2, 4, 16, 8, 128, device="cuda:0")
        b = torch.empty(2, 4, 16, 8, 128, device="cuda:1")
        with pytest.raises(ValueError, match="one device"):
            kvstrata.describe_pieces(kv_cache_pieces([a, b], "vllm_nhd"))


def test_ipc_event_pool_round_robin():
    pool = kvstrata.IpcEventPool(0, 3)
    assert len(pool.handles) == 3 and all(len(h) == 64 for h in pool.handles)
    assert [pool.record() for _ in range(4)] == [1, 2, 3, 1]
    torch.cuda.synchronize()


@pytest.mark.parametrize("layout", ["nhd", "hnd", "flashinfer", "cross_layer"])
def test_pieces_address_exactly_the_blocks(layout):
    """Copying through the description's pieces (what the daemon does, here with torch on
    raw device addresses) stores each block's bytes and loads them into other blocks."""
    from gpu_support import assert_blocks_equal, reference_load, reference_store

    cache = KvCache(layout, 128)
    cache.poison(range(128))
    desc = kvstrata.describe_pieces(cache.pieces(), BLOCK_BYTES)
    src, dst = [3, 0, 127, 64, 65], [10, 11, 99, 1, 2]
    cache.fill_random(src)
    slots = reference_store(desc, cache.device, src)
    assert slots.shape == (len(src), BLOCK_BYTES)
    assert_blocks_equal(slots, cache.blocks(src), "slots vs blocks()")   # the slot byte order
    reference_load(desc, cache.device, dst, slots)
    assert_blocks_equal(cache.blocks(dst), cache.blocks(src), "loaded blocks")
    untouched = [b for b in range(128) if b not in src + dst]
    poison = cache.blocks([untouched[0]])
    assert_blocks_equal(cache.blocks(untouched), poison.expand(len(untouched), -1), "other blocks")


class _ReferenceSession:
    """The daemon's job semantics done in-process with the reference copier: checks the
    test helpers (roundtrip_rounds, KvCache) apart from the daemon."""

    def __init__(self, desc, device):
        self.desc, self.device = desc, device
        self.slots, self.done, self.next_job = {}, {}, 0

    def _finish(self, kind, failed):
        from kvstrata import pb

        self.next_job += 1
        self.done[self.next_job] = pb.JobCompletion(job_id=self.next_job, kind=kind,
                                                    ok=not failed, failed_blocks=failed)
        return self.next_job

    def submit_store(self, ns, reg, keys, ids, event=None):
        from gpu_support import reference_store
        from kvstrata import pb

        torch.cuda.synchronize()  # stands in for the daemon waiting on the event
        for k, row in zip(keys, reference_store(self.desc, self.device, ids)):
            self.slots.setdefault(k, row.clone())
        return self._finish(pb.JobCompletion.KIND_STORE, [])

    def submit_load(self, ns, reg, keys, ids, lease_id=0):
        from gpu_support import reference_load
        from kvstrata import pb

        present = [i for i, k in enumerate(keys) if k in self.slots]
        if present:
            rows = torch.stack([self.slots[keys[i]] for i in present])
            reference_load(self.desc, self.device, [ids[i] for i in present], rows)
        torch.cuda.synchronize()
        return self._finish(pb.JobCompletion.KIND_LOAD,
                            [i for i in range(len(keys)) if i not in present])

    def wait_jobs(self, jobs, timeout=None):
        return {j: self.done.pop(j) for j in jobs}


@pytest.mark.parametrize("layout", ["nhd", "cross_layer"])
def test_roundtrip_helpers_with_the_reference_copier(layout):
    import random

    from gpu_support import roundtrip_rounds

    cache = KvCache(layout, 256)
    cache.poison(range(256))
    desc = kvstrata.describe_pieces(cache.pieces(), BLOCK_BYTES)

    class Reg:
        description = desc

        @staticmethod
        def record_event():
            return 1

    counters = roundtrip_rounds(_ReferenceSession(desc, cache.device), None, Reg, cache,
                                random.Random(layout), 6, max_blocks=16)
    assert counters["rounds"] == 6 and counters["loaded_blocks"] > 0
