"""KVStrataStorage: SGLang's HiCache L3 storage backend on kvstratad.

SGLang constructs it through its `dynamic` backend factory as
`KVStrataStorage(storage_config, kwargs)` and then calls `register_mem_pool_host(pool)`.
With `"interface_v1": 1` in the extra-config SGLang moves pages with `batch_get_v1` /
`batch_set_v1` (host pool indices): the bytes go once, with streaming stores
(kvstrata.stream_copy), between the host pool's page pieces (`get_page_buffer_meta`) and the
daemon's L1 slots in the shared-memory region this process maps, through the client's one
reserve → copy → commit path (Session.store_pointers / load_pointers). `batch_exists`
answers the number of leading pages present (Session.lookup: the daemon's lookup fast path,
a binary frame on a persistent Unix socket, falling back to gRPC), or, with the load planner
(planner.py, option `load_planner`), only the leading pages whose load beats computing them.
The legacy `get`/`set`/`batch_get`/`batch_set`/`exists` take whole flat pages
(`HostKVCache.get_data_page(flat=True)`) and store the same blocks. Hybrid models (SGLang's
HybridCacheController) add the v2 calls for their extra host pools, sliding-window KV and
Mamba state (`register_mem_host_pool_v2`, `batch_exists_v2`, `batch_get_v2`,
`batch_set_v2`), each pool in its own namespace (hybrid.py).

Fail-safe: while kvstratad cannot be reached every call answers "not found" / False at once
(never None: SGLang would stop its prefetch thread), and the backend reconnects when the
daemon is back. Malformed arguments raise TypeError/ValueError before any byte moves.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import grpc
import kvstrata
from sglang.srt.mem_cache.hicache_storage import (HiCacheStorage, HiCacheStorageConfig,
                                                  HiCacheStorageExtraInfo, PoolName,
                                                  PoolTransferResult)

from .copier import PieceCopier
from .hybrid import KV, ExtraPool, describe_extra_pool, fold_hits, pool_name
from .keys import page_keys
from .layout import (PageLayout, anchor_host_pool, checked_host_indices, describe_pool,
                     legacy_block_view)
from .options import BackendOptions, open_link, parse_options
from .planner import PagePlanner, engine_model, planner_wanted
from .staged_get import staged_load

log = logging.getLogger("kvstrata_sglang")
PAGES = "pages"  # the link's key of the host pool's namespace

_INTERNAL = grpc.StatusCode.INTERNAL


def storage_writer(storage_config: Any) -> bool:
    """Whether this rank writes pages: HiCacheStorageConfig.is_storage_writer (SGLang
    0.5.23), else SGLang 0.5.17's rule, the same as its controller's backup skip: every
    rank of an MHA model, only TP rank 0 of an MLA model (whose ranks hold the same KV)."""
    writer = getattr(storage_config, "is_storage_writer", None)
    if writer is not None:
        return bool(writer)
    return not storage_config.is_mla_model or storage_config.tp_rank == 0


class KVStrataStorage(HiCacheStorage):
    """HiCache L3 on kvstratad (see the module docstring and docs/sglang-connector.md)."""

    def __init__(self, storage_config: HiCacheStorageConfig, kwargs: Optional[dict] = None,
                 ) -> None:
        if not isinstance(storage_config, HiCacheStorageConfig):
            raise TypeError("KVStrataStorage needs SGLang's HiCacheStorageConfig, got "
                            f"{type(storage_config).__name__}")
        self.storage_config = storage_config
        self.options: BackendOptions = parse_options(storage_config.extra_config)
        self.is_writer = storage_writer(storage_config)
        self.layout: Optional[PageLayout] = None
        self.mem_pool_host: Any = None
        self._kv_host: Any = None  # the KV pool (a HostPoolGroup's anchor, or the pool)
        self.extra_pools: Dict[str, ExtraPool] = {}  # v2: SWA / Mamba host pools by name
        self._link = open_link(self.options)
        self._copier = PieceCopier(self.options.copy_threads)
        self._metrics_lock = threading.Lock()
        self._prefetch_pgs: List[int] = []
        self._backup_pgs: List[int] = []
        self._prefetch_bw: List[float] = []
        self._backup_bw: List[float] = []
        self.counters: Dict[str, int] = dict(
            exists_calls=0, exists_fast=0, exists_hits=0, get_pages=0, get_hits=0, set_pages=0,
            set_stored=0, set_already_present=0, set_dropped=0, set_skipped_not_writer=0,
            unavailable=0, plan_async=0, plan_partial=0, plan_recompute=0,
            plan_unloaded_tokens=0, load_gave_up=0, load_gave_up_tokens=0, exists_v2_calls=0, exists_v2_lookups=0, get_v2_pages=0,
            get_v2_hits=0, set_v2_pages=0, set_v2_stored=0)
        self.planner: Optional[PagePlanner] = None  # set by register_mem_pool_host

    # ------------------------------------------------------------------ setup

    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        """Learn the host pool's page layout and register its namespace with the daemon
        (a hybrid model's HostPoolGroup: its anchor, the full-attention KV pool)."""
        kv_host = anchor_host_pool(mem_pool_host)
        layout = describe_pool(kv_host, self.storage_config, self.options)
        super().register_mem_pool_host(mem_pool_host)
        self.layout, self._kv_host = layout, kv_host
        self._link.set_namespace(PAGES, layout.spec)
        model = engine_model()
        if self.planner is None and planner_wanted(self.options.load_planner, model):
            self.planner = PagePlanner(self._link, layout.page_size, layout.bytes_per_page,
                                       model)
            # Its decisions go with the heartbeats: the daemon's `kvstrata stats`.
            self._link.set_heartbeat_counters(self._planner_counters)
            log.info("kvstrata: load planner on (%s, device %s)", model.source,
                     model.device or "unknown")

    @property
    def namespace(self) -> Optional[kvstrata.RegisteredNamespace]:
        """The registered namespace (None until the daemon was reached once)."""
        return self._link.namespaces.get(PAGES) if self._link.session() is not None else None

    @property
    def session(self) -> Optional[kvstrata.Session]:
        return self._link.current

    def _need_layout(self) -> PageLayout:
        if self.layout is None:
            raise RuntimeError("kvstrata: register_mem_pool_host() must be called first")
        return self.layout

    def _planner_counters(self) -> Dict[str, int]:
        """The load planner's counters (plan_*, load_gave_up*) since the start, for the
        heartbeats."""
        with self._metrics_lock:
            return {k: v for k, v in self.counters.items()
                    if k.startswith("plan_") or k.startswith("load_gave_up")}

    def _count(self, name: str, n: int = 1) -> None:
        with self._metrics_lock:
            self.counters[name] += n

    def _usable(self, key: str = PAGES) -> Any:
        """(session, namespace `key`), or None (counted) while the daemon cannot be used."""
        got = None
        try:
            s = self._link.session()
            ns = self._link.namespaces.get(key) if s is not None else None
            if ns is not None:
                got = (s, ns)
        except kvstrata.KVStrataError as err:  # e.g. the namespace refused on a reconnect
            log.warning("kvstrata: the daemon refused the session or namespace: %s", err)
        if got is None:
            self._count("unavailable")
        return got

    # ------------------------------------------------------------------ v1 (zero copy)

    def batch_exists(self, keys: List[str],
                     extra_info: Optional[HiCacheStorageExtraInfo] = None) -> int:
        """Number of leading pages of `keys` stored (0 while the daemon is unreachable)."""
        self._need_layout()
        kb = page_keys(keys)
        if not kb:
            return 0
        self._count("exists_calls")
        got = self._usable()
        if got is None:
            return 0
        session, ns = got
        try:  # over the lookup fast path (unless fast_lookup is off), else gRPC
            r = session.lookup(ns, kb)
        except kvstrata.KVStrataError as err:
            return self._degrade(err, "lookup", 0)
        if r.fast:
            self._count("exists_fast")
        self._count("exists_hits", r.hit_blocks)
        if self.planner is None or r.hit_blocks == 0:
            return int(r.hit_blocks)
        return self._plan(session, ns, kb, r, extra_info)

    def _plan(self, session: kvstrata.Session, ns: kvstrata.RegisteredNamespace,
              kb: List[bytes], r: kvstrata.LookupResult,
              extra_info: Optional[HiCacheStorageExtraInfo]) -> int:
        """The leading pages of the hit worth prefetching (planner.py), counted. The pages
        cut are not promoted (SGLang computes and stores them again: their L2/L3 copy read
        too would be wasted disk reads), but for a probe of the first run below L1
        (PagePlanner.probe_cut), which keeps the tier measured."""
        hit = int(r.hit_blocks)
        tiers = list(r.tiers[:hit])
        prefix_keys = getattr(extra_info, "prefix_keys", None)
        plan = self.planner.plan(kb, tiers, prefix_keys)
        self._count(f"plan_{plan.kind}")
        self.planner.answered(kb[:plan.units], tiers[:plan.units],
                              self.planner.give_up(plan, tiers, prefix_keys))
        if plan.units == hit:
            return hit
        self._count("plan_unloaded_tokens", (hit - plan.units) * self.layout.page_size)
        self.planner.probe_cut(ns, kb[plan.units:hit], tiers[plan.units:])
        return plan.units

    def batch_set_v1(self, keys: List[str], host_indices: Any,
                     extra_info: Optional[HiCacheStorageExtraInfo] = None) -> List[bool]:
        """Store each page host_indices[i*page:(i+1)*page] under keys[i]; one bool per key
        (True = stored or already present, False = not stored: dropped, or no daemon)."""
        layout = self._need_layout()
        kb = page_keys(keys)
        indices = checked_host_indices(host_indices, layout, len(kb))
        if not kb:
            return []
        if not self.is_writer:  # MLA: another rank writes these same bytes.
            self._count("set_skipped_not_writer", len(kb))
            return [True] * len(kb)
        self._count("set_pages", len(kb))
        ok, start = self._transfer(self._store, "store", kb, indices, self._kv_pool())
        if start is not None:
            self._record(self._backup_pgs, self._backup_bw, sum(ok), start)
        return ok

    def batch_get_v1(self, keys: List[str], host_indices: Any,
                     extra_info: Optional[HiCacheStorageExtraInfo] = None) -> List[bool]:
        """Copy each stored page of keys[i] into host_indices[i*page:(i+1)*page]; one bool
        per key (False = not stored or no daemon: SGLang recomputes from there)."""
        layout = self._need_layout()
        kb = page_keys(keys)
        indices = checked_host_indices(host_indices, layout, len(kb))
        if not kb:
            return []
        self._count("get_pages", len(kb))
        get_id = self.planner.get_started(kb) if self.planner is not None else 0
        staged = self.planner.give_up_of(kb) if self.planner is not None else None
        ok, start = [False] * len(kb), None
        try:  # pages below L1 with a deadline: loaded as they reach L1 (staged_get.py)
            op = self._load if staged is None else self._staged_op(*staged)
            ok, start = self._transfer(op, "load", kb, indices, self._kv_pool())
        finally:  # its time is a sample of the tier when the daemon answered
            if self.planner is not None:
                self.planner.get_ended(get_id, timed=start is not None)
        if start is not None:
            self._count("get_hits", sum(ok))
            self._record(self._prefetch_pgs, self._prefetch_bw, sum(ok), start)
        return ok

    def _staged_op(self, give_up: Any, tiers: Tuple[int, ...]) -> Callable[..., List[bool]]:
        """A _load that loads the pages as they reach L1 and gives up at `give_up`; a
        give-up is counted and the pages not loaded watched as they land (the tier is still
        measured while the planner prices it out)."""
        def op(session: kvstrata.Session, ns: kvstrata.RegisteredNamespace, keys: List[bytes],
               ptrs: Sequence[int], layout: PageLayout) -> List[bool]:
            _check_block_bytes(ns, layout)
            n = layout.segments_per_page
            started = time.monotonic()
            r = staged_load(session, ns, keys, lambda lo, hi: session.load_pointers(
                ns, keys[lo:hi], ptrs[lo * n:hi * n], layout.segment_sizes,
                copy=self._copier.run), give_up)
            if r.gave_up:
                self._count("load_gave_up")
                self._count("load_gave_up_tokens", (len(keys) - r.landed) * layout.page_size)
                log.info("kvstrata: a get gave up after %.0f ms (deadline %.0f ms) with %d of "
                         "%d pages loaded", r.waited_ms, r.deadline_ms, r.landed, len(keys))
                if self.planner is not None:
                    self.planner.watch_promotion(ns, keys[r.landed:],
                                                 tiers[r.landed:len(keys)], started)
            return r.ok
        return op

    def _kv_pool(self) -> ExtraPool:
        """The KV pool as the v1 and v2 copy paths see every pool."""
        return ExtraPool(KV, PAGES, self.layout, self._kv_host, every_rank_writes=False)

    def _transfer(self, op: Callable[..., List[bool]], what: str, kb: List[bytes],
                  indices: Any, pool: ExtraPool) -> Tuple[List[bool], Optional[float]]:
        """op(session, ns, keys, page pointers, layout) on the live session, in `pool`'s
        namespace: its per-page result and its start time; all False and None when there is
        no daemon or the call failed."""
        got = self._usable(pool.key)
        if got is None:
            return [False] * len(kb), None
        ptrs = self._page_pointers(pool, indices, len(kb))
        start = time.perf_counter()
        try:
            return op(got[0], got[1], kb, ptrs, pool.layout), start
        except kvstrata.KVStrataError as err:
            return self._degrade(err, what, [False] * len(kb)), None

    def _store(self, session: kvstrata.Session, ns: kvstrata.RegisteredNamespace,
               keys: List[bytes], ptrs: Sequence[int], layout: PageLayout) -> List[bool]:
        _check_block_bytes(ns, layout)
        r = session.store_pointers(ns, keys, ptrs, layout.segment_sizes,
                                   copy=self._copier.run)
        self._count("set_already_present", r.already_present)
        self._count("set_dropped", len(keys) - r.already_present - r.reserved)
        if r.stored == r.reserved:
            self._count("set_stored", r.stored)
        else:  # The reservation was cut short (session lost meanwhile): claim nothing.
            log.warning("kvstrata: %d of %d reserved pages committed", r.stored, r.reserved)
        return r.ok

    def _load(self, session: kvstrata.Session, ns: kvstrata.RegisteredNamespace,
              keys: List[bytes], ptrs: Sequence[int], layout: PageLayout) -> List[bool]:
        _check_block_bytes(ns, layout)
        return session.load_pointers(ns, keys, ptrs, layout.segment_sizes,
                                     copy=self._copier.run)

    @staticmethod
    def _page_pointers(pool: ExtraPool, indices: Any, num_pages: int) -> Sequence[int]:
        """The host pool's piece addresses for the pages (get_page_buffer_meta), checked
        against the layout learnt at registration."""
        layout = pool.layout
        ptrs, sizes = pool.host.get_page_buffer_meta(indices)
        want = num_pages * layout.segments_per_page
        if len(ptrs) != want or tuple(sizes[:layout.segments_per_page]) != \
                layout.segment_sizes:
            raise RuntimeError(f"kvstrata: the {pool.name} host pool now describes {num_pages} "
                               f"pages as {len(ptrs)} pieces, not {want} of "
                               f"{layout.segment_sizes}")
        return ptrs

    def _degrade(self, err: kvstrata.KVStrataError, what: str, answer: Any) -> Any:
        """A failed daemon call: log, let the link notice a lost daemon, answer `answer`."""
        self._link.failed(err)
        self._count("unavailable")
        log.warning("kvstrata: %s failed, answering not found: %s", what, err)
        return answer

    # ------------------------------------------------------------------ v2 (hybrid pools)

    def register_mem_host_pool_v2(self, host_pool: Any, host_pool_name: Any) -> None:
        """A hybrid model's host pool: "kv" is the anchor already registered; "swa" and
        "mamba" get their own namespaces (hybrid.py); any other raises ValueError (SGLang
        then fails the attach: the model is refused at start-up)."""
        layout = self._need_layout()
        name = pool_name(host_pool_name)
        if name == KV:
            if host_pool is not self._kv_host and host_pool is not self.mem_pool_host:
                raise ValueError("kvstrata: the 'kv' host pool given to "
                                 "register_mem_host_pool_v2 is not the registered KV pool")
        else:
            pool = describe_extra_pool(name, host_pool, self.storage_config, self.options,
                                       layout)
            self.extra_pools[name] = pool
            self._link.set_namespace(pool.key, pool.layout.spec)
        super().register_mem_host_pool_v2(host_pool, host_pool_name)

    def extra_namespace(self, name: str) -> Optional[kvstrata.RegisteredNamespace]:
        """The registered namespace of extra pool `name` (None: unknown or no daemon yet)."""
        pool = self.extra_pools.get(name)
        if pool is None or self._link.session() is None:
            return None
        return self._link.namespaces.get(pool.key)

    def batch_exists_v2(self, keys: List[str], pool_transfers: Optional[List[Any]] = None,
                        extra_info: Optional[HiCacheStorageExtraInfo] = None) -> Any:
        """SGLang's PoolTransferResult: the longest KV prefix (pages) that every extra pool
        of `pool_transfers` can also restore, by its hit policy (SWA: the window's pages;
        Mamba: the last page's state; hybrid.pool_restorable), each pool's own boundary,
        and (SGLang 0.5.23) every such restorable length. 0 without the daemon."""
        self._need_layout()
        kb = page_keys(keys)
        transfers = list(pool_transfers or [])
        self._count("exists_v2_calls")
        got = self._usable() if kb else None
        if got is None:
            return _pool_result(0, {}, [])
        session, ns = got
        try:
            kv = int(session.lookup(ns, kb).hit_blocks)
            self._count("exists_v2_lookups")
            lookups = {name: self._window_lookup(session, p.key, kb)
                       for name, p in self.extra_pools.items()}
            lookups[KV] = self._window_lookup(session, PAGES, kb)
            final, hits, restorable = fold_hits(kv, transfers, lookups)
        except kvstrata.KVStrataError as err:
            return self._degrade(err, "lookup", _pool_result(0, {}, []))
        if kv:
            hits = {PoolName.KV: kv, **hits}
        return _pool_result(final, hits, restorable)

    def _window_lookup(self, session: kvstrata.Session, key: str, kb: List[bytes]) -> Any:
        """(lo, hi) -> the leading keys of kb[lo:hi] namespace `key` holds (counted)."""
        def lookup(lo: int, hi: int) -> int:
            ns = self._link.namespaces.get(key)
            if ns is None:
                return 0
            self._count("exists_v2_lookups")
            return int(session.lookup(ns, kb[lo:hi]).hit_blocks)
        return lookup

    def batch_get_v2(self, transfers: List[Any],
                     extra_info: Optional[HiCacheStorageExtraInfo] = None,
                     ) -> Dict[Any, List[bool]]:
        """Copy each transfer's stored pages (keys[i] -> its pool's host pages
        host_indices[i*page:(i+1)*page]) from its pool's namespace; per pool, one bool per
        key (False: not stored, or no daemon)."""
        return {t.name: self._v2_one(t, self._load, "load") for t in transfers}

    def batch_set_v2(self, transfers: List[Any],
                     extra_info: Optional[HiCacheStorageExtraInfo] = None,
                     ) -> Dict[Any, List[bool]]:
        """Store each transfer's pages into its pool's namespace; per pool, one bool per key
        (True: stored or already present)."""
        return {t.name: self._v2_one(t, self._store, "store") for t in transfers}

    def _v2_one(self, t: Any, op: Callable[..., List[bool]], what: str) -> List[bool]:
        self._need_layout()
        name, kb = pool_name(t.name), page_keys(list(t.keys or []))
        pool = self._kv_pool() if name == KV else self.extra_pools.get(name)
        if pool is None:
            raise ValueError(f"kvstrata: batch_{'get' if what == 'load' else 'set'}_v2 for "
                             f"the {name!r} pool, which was never registered")
        numel = getattr(t.host_indices, "numel", None)
        n = 0 if t.host_indices is None else numel() if callable(numel) else None
        if n is not None and n != len(kb) * pool.layout.page_size:  # as SGLang's backends
            log.error("kvstrata: %s pool: %d keys but %d host indices (page size %d)", name,
                      len(kb), n, pool.layout.page_size)
            return [False] * len(kb)
        indices = checked_host_indices(t.host_indices, pool.layout, len(kb))
        if not kb:
            return []
        if what == "store" and not (self.is_writer or pool.every_rank_writes):
            self._count("set_skipped_not_writer", len(kb))  # MLA: rank 0 stores the same
            return [True] * len(kb)
        self._count("get_v2_pages" if what == "load" else "set_v2_pages", len(kb))
        ok, start = self._transfer(op, what, kb, indices, pool)
        if start is not None:
            self._count("get_v2_hits" if what == "load" else "set_v2_stored", sum(ok))
        return ok

    # ------------------------------------------------------------------ legacy (whole pages)

    def exists(self, key: str) -> bool:
        return self.batch_exists([key]) == 1

    def get(self, key: str, target_location: Optional[Any] = None,
            target_sizes: Optional[Any] = None) -> Any:
        """The page of `key` copied into target_location (a flat page tensor; a new one when
        None), or None when it is not stored."""
        out = self.batch_get([key], None if target_location is None else [target_location])
        return out[0]

    def batch_get(self, keys: List[str], target_locations: Optional[Any] = None,
                  target_sizes: Optional[Any] = None) -> List[Any]:
        """One flat page tensor per key (target_locations[i] filled, or new), None if missing."""
        layout = self._need_layout()
        kb = page_keys(keys)
        if target_locations is None:
            targets = [self._kv_host.get_dummy_flat_data_page() for _ in kb]
        else:
            targets = list(target_locations)
            if len(targets) != len(kb):
                raise ValueError(f"kvstrata: {len(kb)} keys but {len(targets)} target locations")
        views = [legacy_block_view(t, layout) for t in targets]
        if not kb:
            return []
        self._count("get_pages", len(kb))
        got = self._usable()
        if got is None:
            return [None] * len(kb)
        session, ns = got
        get_id = self.planner.get_started(kb) if self.planner is not None else 0
        found = None
        try:
            found = session.load(ns, kb, out=views)
        except kvstrata.KVStrataError as err:
            return self._degrade(err, "load", [None] * len(kb))
        finally:
            if self.planner is not None:
                self.planner.get_ended(get_id, timed=found is not None)
        self._count("get_hits", sum(found))
        return [t if f else None for t, f in zip(targets, found)]

    def set(self, key: str, value: Optional[Any] = None, target_location: Optional[Any] = None,
            target_sizes: Optional[Any] = None) -> bool:
        if value is None:
            raise ValueError("kvstrata: set() needs the page tensor as value")
        return self.batch_set([key], [value])

    def batch_set(self, keys: List[str], values: Optional[Any] = None,
                  target_locations: Optional[Any] = None, target_sizes: Optional[Any] = None,
                  ) -> bool:
        """Store one flat page tensor per key; True when every page is stored (or present)."""
        layout = self._need_layout()
        kb = page_keys(keys)
        if values is None:
            raise ValueError("kvstrata: batch_set() needs one page tensor per key")
        values = list(values)
        if len(values) != len(kb):
            raise ValueError(f"kvstrata: {len(kb)} keys but {len(values)} values")
        views = [legacy_block_view(v, layout) for v in values]
        if not kb:
            return True
        if not self.is_writer:
            self._count("set_skipped_not_writer", len(kb))
            return True
        self._count("set_pages", len(kb))
        got = self._usable()
        if got is None:
            return False
        session, ns = got
        try:
            r = session.store(ns, kb, views)
        except kvstrata.KVStrataError as err:
            return self._degrade(err, "store", False)
        self._count("set_stored", r.stored)
        self._count("set_already_present", r.already_present)
        self._count("set_dropped", r.dropped)
        return r.dropped == 0

    # ------------------------------------------------------------------ admin, stats

    def clear(self) -> None:
        """Drop every page of this backend's namespaces (the KV pool's and each extra
        pool's) that is not in use, in every tier."""
        for key in [PAGES] + [p.key for p in self.extra_pools.values()]:
            got = self._usable(key)
            if got is None:
                log.warning("kvstrata: clear() skipped: the daemon is unreachable")
                return
            session, ns = got
            try:
                for progress in session.client.clear(fingerprint=ns.fingerprint):
                    if progress.done:
                        break
            except kvstrata.KVStrataError as err:
                self._degrade(err, "clear", None)
                return

    def get_stats(self) -> Any:
        """SGLang's StorageMetrics (pages and GB/s of each prefetch and backup since the last
        call), or None when storage metrics are off."""
        if not self.storage_config.enable_storage_metrics:
            return None
        from sglang.srt.observability.metrics_collector import StorageMetrics

        m = StorageMetrics()
        with self._metrics_lock:
            m.prefetch_pgs.extend(self._prefetch_pgs)
            m.backup_pgs.extend(self._backup_pgs)
            m.prefetch_bandwidth.extend(self._prefetch_bw)
            m.backup_bandwidth.extend(self._backup_bw)
            for lst in (self._prefetch_pgs, self._backup_pgs, self._prefetch_bw, self._backup_bw):
                lst.clear()
        return m

    def _record(self, pages: List[int], bandwidth: List[float], n: int, start: float) -> None:
        if not self.storage_config.enable_storage_metrics or n == 0:
            return
        seconds = max(time.perf_counter() - start, 1e-9)
        with self._metrics_lock:
            pages.append(n)
            bandwidth.append(n * self.layout.bytes_per_page / seconds / 1e9)

    def close(self) -> None:
        """Close the daemon session (SGLang calls this when it detaches the backend)."""
        if self.planner is not None:
            self.planner.close()
        self._copier.close()
        self._link.close()


def _check_block_bytes(ns: kvstrata.RegisteredNamespace, layout: PageLayout) -> None:
    if ns.bytes_per_block != layout.bytes_per_page:
        raise kvstrata.KVStrataError(_INTERNAL, f"the daemon's blocks have "
                                     f"{ns.bytes_per_block} bytes, pages have "
                                     f"{layout.bytes_per_page}")


def _pool_result(final: int, hits: Dict[Any, int], restorable: List[int]) -> Any:
    """PoolTransferResult; SGLang 0.5.23's also carries the restorable prefix lengths."""
    r = PoolTransferResult(final, hits)
    if hasattr(r, "restorable_prefix_pages"):
        r.restorable_prefix_pages = restorable
    return r
