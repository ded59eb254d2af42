"""kvstrata_sglang.device_pool: SGLang's device KV pool (token-major MHA k/v buffers, MLA
kv_buffer, page_size) as kvstrata pieces, described for CUDA IPC on fake tensor-like
objects (no GPU, no daemon)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from fake_cuda import ALLOC_BASE, BF16, BLOCK, PIECE, D, FakeTensor, H, L, describe, per_layer
from kvstrata_sglang.device_pool import device_pool_pieces


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
        desc = describe(device_pool_pieces(kv, page), BLOCK)
        assert desc.num_blocks == 101
        assert [(p.kv_index, p.layer) for p in desc.pieces] == \
            [(0, i) for i in range(L)] + [(1, i) for i in range(L)]
        assert all(p.piece_bytes == p.block_stride == PIECE for p in desc.pieces)
    with pytest.raises(ValueError, match="tokens_per_block"):
        device_pool_pieces((k, v), None)
    with pytest.raises(ValueError, match="multiple"):
        device_pool_pieces((k, v), 64)
    with pytest.raises(ValueError, match="V buffers"):
        device_pool_pieces((k, v[:-1]), page)


def test_sglang_mla_single_list():
    bufs = per_layer(lambda n, p: FakeTensor([n * 64, 1, 576], p), 10)
    desc = describe(device_pool_pieces(bufs, 64))
    assert desc.num_blocks == 10 and len(desc.pieces) == L
    assert desc.block_bytes == L * 64 * 576 * BF16


def test_bad_buffers():
    with pytest.raises(ValueError, match="'k'"):
        device_pool_pieces({"key": [], "value": []}, 16)
    with pytest.raises(TypeError, match="device pool"):
        device_pool_pieces(FakeTensor([16, H, D], ALLOC_BASE), 16)


def test_imports_without_sglang():
    code = ("import sys; sys.modules['sglang'] = None\n"
            "import kvstrata_sglang, kvstrata_sglang.device_pool\n"
            "assert kvstrata_sglang.device_pool_pieces\n"
            "try:\n    kvstrata_sglang.KVStrataStorage\nexcept ImportError:\n    print('no-sglang-ok')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "no-sglang-ok" in r.stdout, r.stderr
