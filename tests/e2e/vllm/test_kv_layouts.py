"""kvstrata_vllm.kv_layouts: vLLM's KV tensor shapes as kvstrata pieces, described for CUDA
IPC on fake tensor-like objects (no GPU, no daemon), the namespace's kv_layout from vLLM's
config, and the CPU engine's byte rows (HostCache) over real CPU tensors."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from fake_cuda import (ALLOC_BASE, BF16, BLOCK, PIECE, UUID, D, FakeExporter, FakeTensor, H,
                       L, T, describe as describe_pieces, per_layer)
from kvstrata_vllm.host_cache import HostCache
from kvstrata_vllm.kv_layouts import kv_cache_pieces, kv_layout_name, layer_names


def describe(kv, layout="vllm_nhd", block_bytes=None, exporter=None, block_dim=None, **kw):
    return describe_pieces(kv_cache_pieces(kv, layout, block_dim=block_dim), block_bytes,
                           exporter=exporter, **kw)


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
    assert layer_names(kv) == [f"model.layers.{i}.attn" for i in range(L)]


def test_hnd_permuted_view_is_dense_per_block():
    # vLLM's HND stride order: physical [2, N, heads, tokens, dim], logical [2, N, tokens, heads, dim].
    layers = per_layer(lambda n, p: FakeTensor([2, n, H, T, D], p).permute(0, 1, 3, 2, 4), 50)
    assert layers[0].shape == (2, 50, T, H, D)
    desc = describe(layers, "vllm_hnd", BLOCK)
    assert len(desc.pieces) == 2 * L and {p.piece_bytes for p in desc.pieces} == {PIECE}


def test_flashinfer_one_piece_per_layer():
    layers = per_layer(lambda n, p: FakeTensor([n, 2, T, H, D], p), 40)
    desc = describe(layers, "vllm_nhd", BLOCK)
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
    (q,) = describe(view, "vllm_cross_layer", BLOCK,
                    exporter=FakeExporter(single=(ALLOC_BASE, 1 << 30))).pieces
    assert q == p
    with pytest.raises(ValueError, match="one tensor"):
        describe([t, t], "vllm_cross_layer")


def test_bad_arguments():
    t = FakeTensor([2, 8, T, H, D], ALLOC_BASE)
    with pytest.raises(ValueError, match="unknown layout"):
        describe([t], "paged")
    with pytest.raises(TypeError, match="cross_layer"):
        describe(t, "vllm_nhd")
    with pytest.raises(TypeError):
        describe([object()])
    with pytest.raises(ValueError, match="no tensors"):
        describe([])
    desc = describe([t])
    with pytest.raises(ValueError, match="64"):
        desc.to_proto([b"short"])


@pytest.mark.parametrize("name, layout", [(None, "vllm_nhd"), ("NHD", "vllm_nhd"),
                                          ("HND", "vllm_hnd"), ("LBNHC", "vllm_nhd"),
                                          ("LBHNC", "vllm_hnd"), ("BLNHC", "vllm_cross_layer")])
def test_kv_layout_name(name, layout):
    assert kv_layout_name(SimpleNamespace(cache_config=SimpleNamespace(kv_cache_layout=name))) \
        == layout


def test_host_cache_rows_follow_the_pieces():
    torch = pytest.importorskip("torch")
    n, layers = 6, 3
    kv = {f"model.layers.{i}.attn": torch.randint(0, 100, (2, n, 4, 2, 8), dtype=torch.int16)
          for i in range(layers)}
    cache = HostCache(kv_cache_pieces(kv, "vllm_nhd"))
    piece = 4 * 2 * 8 * 2
    assert (cache.num_blocks, cache.block_bytes) == (n, 2 * layers * piece)
    rows = cache.gather([4, 1])
    expected = torch.cat([kv[f"model.layers.{i}.attn"][k, b].reshape(-1).view(torch.uint8)
                          for b in (4, 1) for i in range(layers) for k in (0, 1)])
    assert torch.equal(rows.reshape(-1), expected)
    cache.scatter([0, 5], rows)
    for name, t in kv.items():
        assert torch.equal(t[:, 0], t[:, 4]) and torch.equal(t[:, 5], t[:, 1]), name
    with pytest.raises(ValueError, match="host mode"):
        HostCache(kv_cache_pieces([FakeTensor([2, n, 4, 2, 8], ALLOC_BASE)], "vllm_nhd"))
