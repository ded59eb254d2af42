"""What a page of an SGLang host KV pool is, for KVStrata: the namespace and the byte layout.

One SGLang page (page_size tokens of every layer of this rank) is one KVStrata block. Its
bytes are the pieces `host_pool.get_page_buffer_meta()` names for the page, concatenated in
that order. The namespace records everything that makes those bytes interchangeable:
model, dtype, layers, heads, head size, tokens per page, tensor/pipeline rank, attention
kind, the host pool layout (layer_first, page_first, page_first_direct) and the tenant salt.
So two SGLang instances with the same layout and rank share pages, and instances whose
layouts differ never match (their fingerprints differ). MLA keeps one latent per token,
replicated on every tensor-parallel rank: its namespace is rank-independent (tp 1/0), so
every rank reads what the one writing rank stored.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Tuple

from .options import BackendOptions

# SGLang host pool layout -> kvstrata KvLayout (friendly name).
LAYOUTS = {
    "layer_first": "sglang_layer_first",
    "page_first": "sglang_page_first",
    "page_first_direct": "sglang_page_first_direct",
}
# torch dtype name -> kvstrata DType (friendly name). Others are stored as uint8 bytes with
# the dtype's name in the namespace's model tag, so they still never mix.
DTYPES = {
    "float16": "float16", "bfloat16": "bfloat16", "float32": "float32",
    "float8_e4m3fn": "fp8_e4m3", "float8_e5m2": "fp8_e5m2", "uint8": "uint8",
}


@dataclass(frozen=True)
class PageLayout:
    """One page of the registered host pool as one KVStrata block."""

    spec: Dict[str, Any]             # kvstrata.namespace_spec keyword fields
    layout: str                      # SGLang layout name
    is_mla: bool
    page_size: int                   # tokens per page
    pool_tokens: int                 # host pool size in tokens (valid indices: [0, this))
    bytes_per_page: int
    segment_sizes: Tuple[int, ...]   # per page, in get_page_buffer_meta order
    segment_offsets: Tuple[int, ...]  # where each piece starts inside the block
    num_layers: int
    # Legacy get/set pass whole flat pages (HostKVCache.get_data_page(flat=True)); for an MHA
    # layer_first pool that order is [K|V][layer] while the block is [layer][K|V].
    legacy_swaps_kv_and_layer: bool

    @property
    def segments_per_page(self) -> int:
        return len(self.segment_sizes)


def _dtype_name(dtype: Any) -> str:
    return str(dtype).rsplit(".", 1)[-1]


def anchor_host_pool(host_pool: Any) -> Any:
    """The KV pool of an SGLang HostPoolGroup (hybrid models: the full-attention pool, its
    `anchor_entry`), else the pool itself."""
    entry = getattr(host_pool, "anchor_entry", None)
    if entry is not None and hasattr(host_pool, "entry_map"):
        return entry.host_pool
    return host_pool


def model_tag(storage_config: Any, options: BackendOptions) -> str:
    """The namespace's model name: the option, else SGLang's; ValueError when none."""
    model = options.model or storage_config.model_name
    if not model:
        raise ValueError("kvstrata: SGLang passed no model name; set \"model\" in the "
                         "storage extra-config (pages of different models must never mix)")
    return str(model)


def cp_suffix(storage_config: Any) -> str:
    """"#cp=rank/size" when context-parallel ranks each hold their own slice of every page."""
    cp_size = int(getattr(storage_config, "attn_cp_size", 1) or 1)
    return f"#cp={storage_config.attn_cp_rank}/{cp_size}" if cp_size > 1 else ""


def describe_pool(host_pool: Any, storage_config: Any, options: BackendOptions,
                  kv_group: str = "") -> PageLayout:
    """The PageLayout of an SGLang HostKVCache; ValueError for pools it cannot store.
    kv_group names a hybrid model's extra KV pool (e.g. its sliding-window layers): its
    namespace then never shares blocks with the full-attention pool's."""
    layout = getattr(host_pool, "layout", None)
    if layout not in LAYOUTS:
        raise ValueError(f"kvstrata: host pool layout {layout!r} is not supported; use "
                         f"--hicache-mem-layout {' / '.join(LAYOUTS)}")
    if getattr(host_pool, "kv_buffer", None) is None:
        raise ValueError("kvstrata: the host pool has no KV buffer (allocator-only pool); "
                         "this backend stores KV pages only")
    dcp = int(getattr(storage_config, "dcp_size", 1) or 1)
    if dcp > 1 or int(getattr(host_pool, "dcp_size", 1) or 1) > 1:
        raise ValueError("kvstrata: decode context parallelism (dcp_size > 1) is not supported")
    is_mla = bool(storage_config.is_mla_model)
    page_size = int(host_pool.page_size)
    num_layers = int(host_pool.layer_num)
    item = int(host_pool.dtype.itemsize)
    if is_mla:
        if not hasattr(host_pool, "kv_cache_dim"):
            raise ValueError(f"kvstrata: storage config says MLA but {type(host_pool).__name__} "
                             "has no kv_cache_dim")
        heads, head_size, components = 1, int(host_pool.kv_cache_dim), 1
    else:
        if not hasattr(host_pool, "head_num") or not hasattr(host_pool, "head_dim"):
            raise ValueError(f"kvstrata: {type(host_pool).__name__} is not an MHA host pool "
                             "(no head_num/head_dim)")
        heads, head_size, components = int(host_pool.head_num), int(host_pool.head_dim), 2
    expected = components * num_layers * heads * head_size * page_size * item

    import torch  # SGLang's own dependency; only needed once the pool is known.

    ptrs, sizes = host_pool.get_page_buffer_meta(torch.arange(page_size, dtype=torch.int64))
    sizes = tuple(int(s) for s in sizes)
    if len(ptrs) != len(sizes) or not sizes or sum(sizes) != expected:
        raise ValueError(f"kvstrata: {type(host_pool).__name__} ({layout}) describes a page as "
                         f"{len(sizes)} pieces of {sum(sizes)} bytes, but its geometry gives "
                         f"{expected} bytes; this pool format is not supported")
    offsets, at = [], 0
    for s in sizes:
        offsets.append(at)
        at += s

    tag = model_tag(storage_config, options)
    dtype_name = _dtype_name(host_pool.dtype)
    dtype = DTYPES.get(dtype_name)
    if dtype is None:  # Bytes of an exotic dtype: keep its name in the namespace.
        dtype, head_size, tag = "uint8", head_size * item, f"{tag}#dtype={dtype_name}"
    tag += cp_suffix(storage_config)
    spec: Dict[str, Any] = dict(
        engine="sglang", model=tag, dtype=dtype, num_layers=num_layers, num_kv_heads=heads,
        head_size=head_size, tokens_per_block=page_size,
        tp_size=1 if is_mla else int(storage_config.tp_size),
        tp_rank=0 if is_mla else int(storage_config.tp_rank),
        pp_size=int(storage_config.pp_size), pp_rank=int(storage_config.pp_rank),
        kv_layout=LAYOUTS[layout], attention="mla" if is_mla else "mha", salt=options.salt)
    if kv_group:  # Only then: the full-attention pool's fingerprint stays what it was.
        spec["kv_group"] = kv_group
    return PageLayout(spec=spec, layout=layout, is_mla=is_mla, page_size=page_size,
                      pool_tokens=int(host_pool.size), bytes_per_page=expected,
                      segment_sizes=sizes, segment_offsets=tuple(offsets),
                      num_layers=num_layers,
                      legacy_swaps_kv_and_layer=(not is_mla and layout == "layer_first"))


def legacy_block_view(page: Any, layout: PageLayout) -> Any:
    """A numpy uint8 view of a flat legacy page tensor, in block byte order (may be strided).

    ValueError unless it is a CPU tensor of exactly bytes_per_page bytes.
    """
    import torch

    if not isinstance(page, torch.Tensor):
        raise TypeError(f"kvstrata: a page must be a torch.Tensor, got {type(page).__name__}")
    if page.device.type != "cpu":
        raise ValueError(f"kvstrata: the page tensor is on {page.device}; host pages are CPU")
    if page.numel() * page.element_size() != layout.bytes_per_page:
        raise ValueError(f"kvstrata: the page tensor has {page.numel() * page.element_size()} "
                         f"bytes; pages of this pool have {layout.bytes_per_page}")
    if not page.is_contiguous():
        raise ValueError("kvstrata: the page tensor must be contiguous (a flat data page)")
    flat = page.reshape(-1).view(torch.uint8).numpy()
    if layout.legacy_swaps_kv_and_layer:
        return flat.reshape(2, layout.num_layers, -1).transpose(1, 0, 2)
    return flat


def checked_host_indices(host_indices: Any, layout: PageLayout, num_keys: int) -> Any:
    """host_indices as a CPU int64 tensor, validated (TypeError/ValueError naming the problem)."""
    import torch

    if not isinstance(host_indices, torch.Tensor):
        raise TypeError("kvstrata: host_indices must be a torch.Tensor, got "
                        f"{type(host_indices).__name__}")
    if host_indices.dim() != 1 or host_indices.dtype.is_floating_point or \
            host_indices.dtype.is_complex or host_indices.dtype == torch.bool:
        raise ValueError("kvstrata: host_indices must be a 1-D integer tensor, got "
                         f"{tuple(host_indices.shape)} {host_indices.dtype}")
    ps = layout.page_size
    if host_indices.numel() != num_keys * ps:
        raise ValueError(f"kvstrata: {num_keys} keys need {num_keys * ps} host indices "
                         f"(page size {ps}), got {host_indices.numel()}")
    idx = host_indices.to("cpu", torch.int64).view(num_keys, ps)
    starts = idx[:, 0]
    expect = starts.unsqueeze(1) + torch.arange(ps, dtype=torch.int64)
    if not torch.equal(idx, expect):
        raise ValueError("kvstrata: every page's host indices must be consecutive")
    bad = (starts < 0) | (starts % ps != 0) | (starts + ps > layout.pool_tokens)
    if bool(bad.any()):
        first = int(starts[bad][0])
        raise ValueError(f"kvstrata: host index {first} is not the start of a page inside the "
                         f"host pool ({layout.pool_tokens} tokens, page size {ps})")
    return idx.reshape(-1)
