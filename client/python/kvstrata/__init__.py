"""Python client for kvstratad, the KVStrata KV-cache daemon (gRPC over a Unix socket or TCP).

    with kvstrata.Session(client_name="my-engine") as s:
        ns = s.register_namespace(engine="vllm", model="m", dtype="bfloat16", ...)
        s.store(ns, keys, blocks)                   # host mode, through shared memory
        hit = s.lookup(ns, keys, lease=True)
        found = s.load(ns, keys[:hit.hit_blocks], lease_id=hit.lease_id)

GPU mode (the daemon copies between CUDA KV caches and its tiers; torch on demand). The KV
tensors are registered as pieces (kvstrata.kv_pieces: tensor_pieces; an engine's shapes are
in its connector, e.g. kvstrata_vllm.kv_layouts.kv_cache_pieces):

        reg = s.register_cuda_kv_caches(ns, pieces)              # CUDA IPC handles, once
        job = s.submit_store(ns, reg, keys, block_ids, event=reg.record_event())
        done = s.wait_jobs([job], timeout=10)[job]               # JobCompletion: ok, failed_blocks

An engine that must never fail because of the daemon holds its session in a
kvstrata.DaemonLink (None while the daemon is unreachable: treat it as a miss).
"""
from __future__ import annotations

from . import pb
from .client import ADMIN, CONTROL, Client, ResponseStream
from .cuda import (CudaPiece, CudaRegistration, IpcAllocation, IpcEventPool,
                   KvCacheDescription, LayerFlags, describe_pieces, format_gpu_uuid, gpu_uuid)
from .endpoint import Endpoint, default_endpoint, parse_endpoint
from .errors import DaemonUnavailable, KVStrataError
from .host import LoadResult, LookupResult, StoreResult
from .lookups import NamespacesLookup
from .jobs import CompletionTracker
from .kv_pieces import TensorPiece, tensor_pieces
from .link import DaemonLink
from .session import RegisteredNamespace, Session
from .shm import SharedRegion, SharedRegionError, receive_region_fd
from .spec import namespace_spec
from .tier import DaemonTier, Tier, TierEntry, TierTable

__version__ = "0.1.0"
__all__ = [
    "ADMIN", "CONTROL", "Client", "CompletionTracker", "CudaPiece", "CudaRegistration",
    "DaemonLink", "DaemonTier", "DaemonUnavailable", "Endpoint", "IpcAllocation", "IpcEventPool",
    "KVStrataError", "KvCacheDescription", "LayerFlags", "LoadResult", "LookupResult",
    "NamespacesLookup", "RegisteredNamespace", "ResponseStream", "Session", "SharedRegion",
    "SharedRegionError", "StoreResult", "TensorPiece", "Tier", "TierEntry", "TierTable",
    "default_endpoint", "describe_pieces", "format_gpu_uuid", "gpu_uuid", "namespace_spec",
    "parse_endpoint", "pb", "receive_region_fd", "tensor_pieces",
]
