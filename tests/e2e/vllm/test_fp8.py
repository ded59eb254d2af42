"""fp8 KV caches: vLLM keeps every fp8 kind in torch.uint8 tensors, so the namespace's dtype
comes from --kv-cache-dtype; caches whose bytes differ never share a namespace, and caches
whose bytes mean nothing to another process are refused at start-up."""
from __future__ import annotations

import pytest
import torch
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec

from harness import BLOCK, HEAD, KV_HEADS, vllm_config
from kvstrata import pb
from kvstrata_vllm import KVStrataConnector
from test_scheduler import ext


def _kv_cache_config(dtype: torch.dtype) -> KVCacheConfig:
    spec = FullAttentionSpec(block_size=BLOCK, num_kv_heads=KV_HEADS, head_size=HEAD,
                             dtype=dtype)
    return KVCacheConfig(num_blocks=64, kv_cache_tensors=[],
                         kv_cache_groups=[KVCacheGroupSpec(["layers.0.attn"], spec)])


def scheduler(model_dir, daemon, cache_dtype: str, calculate_scales: bool = False):
    config = vllm_config(model_dir, ext(daemon))
    config.cache_config.cache_dtype = cache_dtype
    config.cache_config.calculate_kv_scales = calculate_scales
    spec_dtype = torch.uint8 if cache_dtype.startswith("fp8") else torch.float32
    return KVStrataConnector(config, KVConnectorRole.SCHEDULER, _kv_cache_config(spec_dtype))


def test_fp8_kinds_have_namespaces_of_their_own(model_dir, daemon):
    made = {name: scheduler(model_dir, daemon, name)
            for name in ("fp8", "fp8_e4m3", "fp8_e5m2", "auto")}
    try:
        ns = {name: c.scheduler.link.namespaces[(0, 0)] for name, c in made.items()}
        assert ns["fp8"].fingerprint == ns["fp8_e4m3"].fingerprint   # vLLM: fp8 = e4m3
        assert len({ns[n].fingerprint for n in ("fp8_e4m3", "fp8_e5m2", "auto")}) == 3
        with daemon.client() as c:
            dtypes = {n.fingerprint: n.spec for n in c.list_namespaces().namespaces}
        assert dtypes[ns["fp8_e4m3"].fingerprint].dtype == pb.DTYPE_FP8_E4M3
        assert dtypes[ns["fp8_e5m2"].fingerprint].dtype == pb.DTYPE_FP8_E5M2
        # The bytes move unchanged: one byte per element, the plain layout.
        assert ns["fp8_e5m2"].bytes_per_block == 2 * KV_HEADS * HEAD * BLOCK
        assert dtypes[ns["fp8_e5m2"].fingerprint].kv_layout != pb.KV_LAYOUT_OPAQUE
    finally:
        for c in made.values():
            c.shutdown()


@pytest.mark.parametrize("cache_dtype, calculate, says", [
    ("fp8", True, "calculate_kv_scales"),
    ("fp8_inc", False, "fp8_inc"),
    ("fp8_ds_mla", False, "fp8_ds_mla"),
])
def test_caches_whose_bytes_cannot_be_shared_are_refused_in_one_line(model_dir, daemon,
                                                                    cache_dtype, calculate, says):
    with pytest.raises(ValueError) as err:
        scheduler(model_dir, daemon, cache_dtype, calculate)
    assert says in str(err.value) and "\n" not in str(err.value)
