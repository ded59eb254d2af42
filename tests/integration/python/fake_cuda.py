"""Fake CUDA tensors and IPC exporters: GPU-mode descriptions checked without a GPU, torch
or daemon (kvstrata.kv_pieces, kvstrata.cuda, and the connectors' layouts in
tests/e2e/vllm and tests/integration/sglang)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Sequence, Tuple

from kvstrata import cuda as kcuda

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


def describe(pieces, block_bytes=None, exporter=None, **kw):
    """kvstrata.describe_pieces with a fake exporter and the fake GPU's uuid."""
    import kvstrata

    return kvstrata.describe_pieces(pieces, block_bytes, exporter=exporter or FakeExporter(),
                                    gpu_uuid=UUID, **kw)
