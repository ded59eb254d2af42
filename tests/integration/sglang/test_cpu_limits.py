"""Why there is no end-to-end SGLang server run with HiCache + KVStrata on this CPU-only
machine, checked against the pinned sglang (0.5.23; also true of 0.5.17 to 0.5.22, the
other SGLangs the tests run on), so the reason stays true: when a new pin makes these tests fail, SGLang
can move KV between a CPU "device" pool and its host pool, and the end-to-end run
(docs/sglang-connector.md) should be added.

1. SGLang's HiCache moves KV between the device pool and the host pool (the L2 step that
   comes before any L3 backend, KVStrata's included) only with sgl_kernel.kvcacheio ops
   (CUDA/ROCm), the sgl-kernel-xpu ops, or Ascend ops. On a CPU device none of them is
   imported, so every host<->device transfer of the real host pools fails (NameError).
2. The CPU engine (SGLANG_USE_CPU_ENGINE=1) imports sgl_kernel.copy_all_layer_kv_cache_cpu
   from sgl-kernel's CPU build, which is not on PyPI (the sglang-kernel wheel there is the
   CUDA build: its ops library links libcuda.so.1).
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from sglang_pools import make_pool

CASES = [("layer_first", "kernel"), ("layer_first", "direct"), ("page_first", "kernel"),
         ("page_first_direct", "direct")]


@pytest.mark.parametrize("layout,io_backend", CASES)
def test_no_host_device_transfer_on_cpu(layout, io_backend):
    pool = make_pool("mha", layout)
    host = pool.alloc(pool.page_size)
    dev = torch.arange(pool.page_size, dtype=torch.int64)
    # The device pool the host pool was made from (SGLang 0.5.17 to 0.5.21; 0.5.18 to 0.5.21
    # read its pointers before the transfer); 0.5.22 and later keep the buffers themselves.
    device_pool = getattr(pool, "device_pool", None)
    with pytest.raises(NameError, match="transfer_kv"):
        pool.backup_from_device_all_layer(device_pool, host, dev, io_backend)
    with pytest.raises(NameError, match="transfer_kv"):
        pool.load_to_device_per_layer(device_pool, host, dev, 0, io_backend)


def test_cpu_engine_needs_sgl_kernel_cpu_build():
    env = {**os.environ, "SGLANG_USE_CPU_ENGINE": "1"}
    p = subprocess.run([sys.executable, "-c", "import sglang.srt.mem_cache.memory_pool"],
                       env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode != 0
    assert "sgl_kernel" in p.stderr, p.stderr[-2000:]
