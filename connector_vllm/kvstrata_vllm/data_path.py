"""DataPath: how a worker moves its KV cache blocks to and from the daemon, one strategy per
place vLLM's KV cache lives -- host_path.HostPath (CPU tensors, through the daemon's shared
memory) and cuda_path.CudaPath (CUDA tensors, the daemon's copy jobs).

The worker (worker.py) picks one at registration and calls it from vLLM's hooks; the
bookkeeping common to both (failed blocks, finished requests, retries, stats, load times)
is the worker's WorkerBook (worker_book.py), to which a data path reports. In both, a
block's bytes are the KV cache's pieces in kv_layouts.py's order.
"""
from __future__ import annotations

from typing import List, Protocol

import kvstrata

from .metadata import KVStrataMetadata, RequestTransfer
from .namespace import KvGroup


class DataPath(Protocol):
    mode: str        # "host" or "cuda"
    layer_wise: bool  # whether a step's same-step loads go as one layer-wise job

    def registered(self, s: kvstrata.Session, group: KvGroup,
                   ns: kvstrata.RegisteredNamespace) -> None:
        """`group`'s namespace is registered on session s (again after a reconnect).
        Raises ValueError when this path cannot serve it (the worker is then disabled)."""

    def start_step(self, meta: KVStrataMetadata) -> None:
        """A step begins, before its loads (start_load_kv)."""

    def load(self, req: RequestTransfer) -> None:
        """Load one request's units of one group; failures go to the WorkerBook."""

    def load_layer_wise(self, reqs: List[RequestTransfer], wait_all: bool) -> None:
        """Load this step's same-step loads as one layer-wise job (layer_wise paths only);
        wait_all: no per-layer hook will run, so wait for every layer now."""

    def wait_layer(self, layer_name: str) -> None:
        """wait_for_layer_load: the forward pass is about to read this layer."""

    def save(self, stores: List[RequestTransfer]) -> None:
        """wait_for_save: this step's forward pass is over and has written `stores` (maybe
        none)."""

    def handle_preemptions(self, meta: KVStrataMetadata) -> None:
        """Preempted requests' blocks are about to be reused: their stores must be done."""

    def wait_loads(self, timeout: float) -> None:
        """A step without a forward pass (KVStrataMetadata.idle_wait_ms): wait up to
        `timeout` s for the asynchronous loads in flight, so that the poll after it reports
        them in this step's output."""

    def poll(self) -> None:
        """get_finished: end this step's layer-wise load; take the completions arrived."""

    def busy_locked(self, kind: str, req_id: str) -> bool:
        """REQUIRES: the WorkerBook's lock. Whether a "load" or "store" of req_id is in
        flight."""

    def drain(self, timeout: float) -> bool:
        """Wait up to `timeout` s for the stores in flight; whether they all finished."""

    def shutdown(self) -> None:
        """The worker stops: wait (a while) for the stores in flight, then stop."""

