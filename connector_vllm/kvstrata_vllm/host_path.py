"""HostPath: the DataPath of a CPU KV cache (vLLM's CPU engine), through the daemon's shared
memory. Units are gathered from the KV cache into rows during wait_for_save (after the
forward pass wrote them) and stored by a background thread; loads copy slots into rows and
scatter them into the allocated blocks in start_load_kv (host_cache.py: HostCache,
StoreThread). Every load is synchronous here: there is no layer-wise load.
"""
from __future__ import annotations

import time
from typing import Dict, List

import kvstrata

from .host_cache import HostCache, StoreThread
from .metadata import KVStrataMetadata, RequestTransfer
from .namespace import KvGroup
from .worker_book import WorkerBook


class HostPath:
    mode = "host"
    layer_wise = False

    def __init__(self, book: WorkerBook, hosts: Dict[int, HostCache],
                 blocks_per_unit: int) -> None:
        self.book = book
        self.hosts = hosts  # per KV cache group
        self.blocks_per_unit = blocks_per_unit
        self.store_thread = StoreThread(book)

    def registered(self, s: kvstrata.Session, group: KvGroup,
                   ns: kvstrata.RegisteredNamespace) -> None:
        host = self.hosts.get(group.index)
        if host is not None and ns.bytes_per_block != host.block_bytes * self.blocks_per_unit:
            raise ValueError(f"the namespace has {ns.bytes_per_block} bytes per unit but the "
                             f"KV cache holds {host.block_bytes * self.blocks_per_unit}")

    def start_step(self, meta: KVStrataMetadata) -> None:
        return

    def load(self, req: RequestTransfer) -> None:
        book = self.book
        host = self.hosts[req.group]
        torch = host.torch
        s, ns = book.session_and_ns(req.group)
        n = len(req.units)
        if s is None or ns is None:
            book.fail_load(req, list(range(n)))
            return
        rows = torch.empty((n, ns.bytes_per_block), dtype=torch.uint8)
        keys = [u.key for u in req.units]
        lease = book.take_lease(req)
        t0 = time.monotonic()
        found = book.link.guard("load", lambda: s.load(ns, keys, out=list(rows), lease_id=lease),
                                None)
        if found is None and lease:  # e.g. the lease expired first (NOT_FOUND): without it
            found = book.link.guard("load", lambda: s.load(ns, keys, out=list(rows)), None)
        if found is not None and all(found):
            book.time_load((req.req_id,), (time.monotonic() - t0) * 1e3)
        if found is None:
            book.fail_load(req, list(range(n)))
            return
        ok = [i for i in range(n) if found[i]]
        block_rows = rows.view(n * self.blocks_per_unit, host.block_bytes)
        ids, picks = [], []
        for i in ok:
            for j, b in enumerate(req.units[i].block_ids):
                if b >= 0:
                    ids.append(b)
                    picks.append(i * self.blocks_per_unit + j)
        if ids:
            host.scatter(ids, block_rows[torch.tensor(picks, dtype=torch.long)])
        book.stats.add("loaded_units", len(ok))
        book.stats.add("loaded_bytes", len(ok) * ns.bytes_per_block)
        missing = [i for i in range(n) if not found[i]]
        if missing:
            book.fail_load(req, missing)
        if not req.sync:
            with book.lock:
                book.recved.add(req.req_id)  # reported once no retry of it is queued

    def load_layer_wise(self, reqs: List[RequestTransfer], wait_all: bool) -> None:
        raise NotImplementedError("host mode has no layer-wise load")

    def wait_layer(self, layer_name: str) -> None:
        return

    def save(self, stores: List[RequestTransfer]) -> None:
        book = self.book
        for group, host in self.hosts.items():
            keys: List[bytes] = []
            ids: List[int] = []
            for req in stores:
                if req.group == group:
                    for u in req.units:
                        keys.append(u.key)
                        ids.extend(u.block_ids)
            if not keys:
                continue
            # Unreachable daemon or a full queue: no copy, a miss later (counted).
            if book.link.session() is None or \
                    not self.store_thread.fits(len(ids) * host.block_bytes):
                book.stats.add("store_dropped_units", len(keys))
                continue
            rows = host.gather(ids).view(len(keys), -1)
            if not self.store_thread.submit(keys, rows, group):
                book.stats.add("store_dropped_units", len(keys))

    def handle_preemptions(self, meta: KVStrataMetadata) -> None:
        return  # Stores copy the blocks out during wait_for_save: nothing holds them.

    def wait_loads(self, timeout: float) -> None:
        return  # Loads end within start_load_kv.

    def poll(self) -> None:
        return

    def busy_locked(self, kind: str, req_id: str) -> bool:
        return False  # Loads end within start_load_kv; stores no longer read the blocks.

    def drain(self, timeout: float) -> bool:
        return self.store_thread.drain(timeout)

    def shutdown(self) -> None:
        self.store_thread.stop(self.book.cfg.store_timeout_s)
