"""Scheduler side: lookups with leases, load plans, store plans, events and lookup stats.

One Link (session) for the scheduler process; it registers the namespace of every KV cache
group of every rank -- each tensor-parallel rank of each pipeline stage (stages.py) -- looks
them all up in one round trip (Session.lookup_namespaces), and counts a unit as a hit only
when every rank of every stage has it -- in every full-attention group, and in every
sliding-window group when the unit lies inside the window before the first token to
compute (hybrid models: vLLM's hybrid KV cache manager, SupportsHMA). The lookup takes one
lease per namespace; each goes to the worker that loads that namespace
(RequestTransfer.leases), whose load consumes it, so nothing releases it. The leases no
load takes (an MLA group's, shared by every rank; the loads of a step that runs
several requests' loads as one layer-wise job; a request that loads nothing after all) pin
the hits until the load is reported, the request ends, or the lease expires (lease_ttl_ms);
a thread sends those releases (releaser.py), so no step waits for one. A request with
nothing to load (vLLM's own prefix cache covers every loadable unit) is looked up without a
lease: the answer only spares stores of units KVStrata holds.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Dict, List, Optional, Set, Tuple

import kvstrata
from kvstrata.planning import LoadPlanner

from .config import ConnectorConfig, max_offload_tokens, open_link
from .kv_event_feed import EVENT_GROUP, KvEventFeed
from .kv_layouts import kv_layout_name
from .metadata import (KVStrataMetadata, KVStrataWorkerMetadata, RequestTransfer, UnitTransfer,
                       load_units)
from .namespace import (KvGroup, cache_dtype, hash_seed_problem, hash_tokens, kv_groups,
                        namespace_fields, unit_keys)
from .stages import engine_ranks, stage_groups
from .load_planning import LoadPlanning
from .releaser import LeaseReleaser
from .request_state import RequestState
from .stats import StatsCounter
from . import trace

log = logging.getLogger("kvstrata_vllm")
# Lookups of the sliding-window groups before a hybrid hit that keeps shrinking is given up.
_WINDOW_ROUNDS = 4
# How long a lookup's answer serves vLLM's repeated asks for a request still waiting.
_REUSE_S = 1.0


class SchedulerSide:
    def __init__(self, vllm_config: Any, kv_cache_config: Any, cfg: ConnectorConfig) -> None:
        self.cfg = cfg
        self.groups: List[KvGroup] = kv_groups(kv_cache_config)
        self.block_size = self.groups[0].geometry.block_size
        self.unit_tokens = cfg.unit_tokens(self.block_size)
        self.blocks_per_unit = self.unit_tokens // self.block_size
        self.hash_tokens = hash_tokens(vllm_config, self.block_size)
        problem = hash_seed_problem(vllm_config)
        if problem:
            log.warning("kvstrata_vllm: PYTHONHASHSEED is not set and %s: KVStrata can only "
                        "serve this engine process what it stored itself (no hits in other "
                        "instances or after a restart). Set PYTHONHASHSEED to the same value "
                        "(e.g. 0) in every vLLM instance that shares kvstratad.", problem)
        parallel = vllm_config.parallel_config
        if (getattr(parallel, "decode_context_parallel_size", 1) or 1) > 1 and \
                any(g.replicated for g in self.groups):
            raise ValueError("KVStrataConnector does not support decode context parallelism "
                             "(decode_context_parallel_size > 1): it splits the MLA cache by "
                             "tokens across ranks")
        self.ranks = engine_ranks(vllm_config)
        # Each stage's groups: vLLM hands the scheduler stage 0's KV cache config.
        stages = stage_groups(vllm_config, self.groups, self.ranks.pp_size, 0)
        layout = kv_layout_name(vllm_config)
        model = str(vllm_config.model_config.model)
        # One namespace per (KV cache group, rank), registered under that key; one per stage
        # for all ranks of an MLA group (KvGroup.replicated).
        kv_dtype = cache_dtype(vllm_config)
        self.fields: Dict[Tuple[int, int], Dict[str, Any]] = {}
        for g in self.groups:
            for r in self.ranks.of_group(g):
                pp, tp = self.ranks.split(r)
                self.fields[(g.index, r)] = namespace_fields(
                    stages[pp][g.index], cfg, model, self.unit_tokens, self.ranks.tp_size, tp,
                    layout, kv_dtype, pp_size=self.ranks.pp_size, pp_rank=pp)
        self.hybrid = len(self.groups) > 1
        self.windowed = any(g.sliding_window for g in self.groups)
        self.host_mode = str(getattr(vllm_config.device_config, "device_type", "")) == "cpu"
        # A load may give up at its deadline only where vLLM recomputes what it left out
        # (a load error under "fail" fails the request) and per block (not a hybrid model).
        policy = getattr(vllm_config.kv_transfer_config, "kv_load_failure_policy", "fail")
        self.deadlines = policy == "recompute" and len(self.groups) == 1
        events = getattr(vllm_config, "kv_events_config", None)
        self.events_enabled = bool(events is not None and getattr(events, "enable_kv_cache_events",
                                                                   False))
        # KV events (take_events); a unit's event once group 0's storing ranks stored it.
        self.events = KvEventFeed(kv_cache_config, self.unit_tokens,
                                  storing_ranks=len(self.ranks.of_group(self.groups[0])))
        self.link = open_link(cfg, "vllm-scheduler", on_session=self._register)
        self.releaser = LeaseReleaser(self.link)   # releases leave the step to a thread
        self._reqs: Dict[str, RequestState] = {}
        self._loads: List[RequestTransfer] = []
        # Requests whose loads ran in the last built step (sync): their leases are released
        # when the next step is built (the workers have pinned the blocks by then).
        self._sync_last: List[RequestState] = []
        self._delayed: Set[str] = set()
        self.stats = StatsCounter()
        # The load planner's plans and load times (load_planning.py).
        self.plans = LoadPlanning(vllm_config, cfg, self.host_mode,
                                  len(self.ranks.of_group(self.groups[0])), self.link,
                                  list(self.fields), self.stats,
                                  lambda: self._namespaces(0), lambda: self._reqs.values())
        if self.plans.planner is not None:  # its decisions go with the heartbeats
            self.link.set_heartbeat_counters(self.stats.planner_totals)  # (`kvstrata stats`)
        # With the planner (one KV cache group), a lookup's lease does not promote the hits
        # below L1: the plan decides first, then what it loads is promoted (promote_load)
        # and what it recomputes the engine stores (LoadPlanning._probe_rest).
        self.plans.lookups_promote = self.plans.planner is None or self.hybrid
        self.link.session()  # Connect now when possible (logged once otherwise).

    @property
    def planner(self) -> Optional[LoadPlanner]:
        """The load planner; None when off (config load_planner)."""
        return self.plans.planner

    def _keys(self, hashes: Any, first: int, end: int) -> List[bytes]:
        return unit_keys(hashes, self.unit_tokens, self.hash_tokens, first, end)

    # ------------------------------------------------------------------ session

    def _register(self, s: kvstrata.Session) -> None:
        for key, f in self.fields.items():
            self.link.register_namespace(s, key, f)

    def _namespaces(self, group: int) -> Optional[List[kvstrata.RegisteredNamespace]]:
        """Every rank's namespace of one KV cache group, every stage's (None without a
        session)."""
        s = self.link.session()
        if s is None:
            return None
        return [self.link.namespaces[key] for key in self._ns_keys(group)]

    def _ns_keys(self, group: int) -> List[Tuple[int, int]]:
        """The (group, rank) keys of one KV cache group's namespaces."""
        return [(group, r) for r in self.ranks.of_group(self.groups[group])]

    def _release(self, st: RequestState) -> None:
        leases, st.leases = st.leases, []
        s = self.link.session() if leases else None
        if s is not None:  # else the daemon's session end (or the lease TTL) releases them
            self.releaser.release(s, [lease_id for _, lease_id in leases])

    # ------------------------------------------------------------------ lookups

    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int) -> Tuple[int, bool]:
        st = self._reqs.get(request.request_id)
        if st is None:
            st = self._reqs[request.request_id] = RequestState(request)
        if st.loading:
            return 0, False
        st.plan = None
        st.sync = False
        if st.load_failed:
            # vLLM recomputes what a failed load left out and asks again; offering the same
            # hit again would retry a failing load every step (e.g. while this engine's
            # worker is still reconnecting after a daemon restart).
            self._release(st)
            return 0, False
        hashes = request.block_hashes
        hashed_u = len(hashes) * self.hash_tokens // self.unit_tokens
        # Units that may load: every full one, the one holding the last token too. vLLM
        # computes at least the last token, so a hit of the whole prompt answers one token
        # less; the unit still loads whole (the forward pass then rewrites the last token's
        # KV, after the load on its layer) and the step computes one token, not a unit --
        # except in a long layer-wise load (cfg.full_hit_max_load_tokens).
        end_u = min(request.num_tokens // self.unit_tokens, hashed_u)
        start_u = num_computed_tokens // self.unit_tokens
        if end_u <= 0:
            self._release(st)
            return 0, False
        s = self.link.session()
        if s is None:
            self._release(st)
            self.stats.add("lookup_unavailable", 1)
            return 0, False
        t0 = time.monotonic()
        # The answer also tells which units KVStrata holds already, so they are not stored
        # again (vLLM's local hits included): _lookup_groups asks from the last unit vLLM
        # holds, and from unit 0 only when KVStrata lacks that one.
        keys = st.keys = self._keys(hashes, 0, end_u)  # kept for update_state_after_alloc
        # A lease only when a load may follow: a request vLLM's own cache covers up to its
        # last loadable unit costs the lookup alone, no release. (With a sliding-window
        # group no load covers the last token's unit: _lookup_groups.)
        last_u = min(end_u, (request.num_tokens - 1) // self.unit_tokens) if self.windowed \
            else end_u
        lease = last_u > start_u
        asked = (num_computed_tokens, request.num_tokens)
        fresh = not self._answer_holds(st, asked, lease, start_u, t0)
        if fresh:  # else vLLM asks again for a request still waiting: the answer stands
            self._release(st)
            found = self._lookup_groups(s, st, keys, start_u, request.num_tokens, lease)
            hit, tiers, present = found if found is not None else (0, [], 0)
            st.tiers = tiers[:hit]
            st.present_units = present
            st.promoted_to = 0
            st.answer = (asked, t0, hit)
            trace.event("lookup", request.request_id,
                        ms=round((time.monotonic() - t0) * 1e3, 3), units=hit, lease=lease)
            self.stats.add("lookup_tokens", max(0, (end_u - start_u) * self.unit_tokens))
        else:
            hit = st.answer[2]
            self.stats.add("lookup_reused", 1)
        if hit > start_u:
            hit = self.plans.plan(st, request, keys, start_u, hit, num_computed_tokens,
                                  self.unit_tokens, t0, in_step_ok=self._in_step_allowed(),
                                  partial_ok=not self.hybrid, fresh=fresh,
                                  deadline_ok=self.deadlines)
            hit = self.plans.promote_load(s, st, keys, start_u, hit, self.cfg.lease_ttl_ms,
                                          self._release)
        if hit * self.unit_tokens >= request.num_tokens and st.sync and not self.host_mode and \
                not self.hybrid and \
                (hit - start_u) * self.unit_tokens > self.cfg.full_hit_max_load_tokens:
            hit -= 1  # A long layer-wise load: the last unit's forward pass overlaps it.
        matched = min(hit * self.unit_tokens, request.num_tokens - 1) - num_computed_tokens
        st.ready_tokens = num_computed_tokens + max(0, matched)
        if hit <= start_u or matched <= 0:
            self._release(st)   # the answer stands: a miss needs no lease
            st.sync = False
            return 0, False
        if fresh:
            self.stats.add("hit_tokens", matched)
        st.plan = (num_computed_tokens, start_u, hit)
        st.local_tokens = num_computed_tokens
        return matched, not st.sync

    def _answer_holds(self, st: RequestState, asked: Tuple[int, int], lease: bool, start_u: int,
                      now: float) -> bool:
        """Whether st's last lookup still answers this call: vLLM asks again, every step, for
        a request that could not be scheduled (no free blocks). The same request state,
        asked within REUSE_S (and half the lease's life), with the lease still held when a
        load may follow -- else the daemon is asked again."""
        if st.answer is None or st.answer[0] != asked:
            return False
        if now - st.answer[1] > min(_REUSE_S, self.cfg.lease_ttl_ms / 2000.0):
            return False
        return bool(st.leases) or not lease or st.answer[2] <= start_u

    def _lookup_chain(self, s: kvstrata.Session, st: RequestState, ns_keys: List[Tuple[int, int]],
                      keys: List[bytes], lease: bool) -> Optional[Tuple[int, List[int]]]:
        """How many leading keys every namespace of `ns_keys` holds, and per unit the slowest
        tier any of them holds it in, in one round trip; None when the lookup failed.
        Leases go to st.leases."""
        if not keys:
            return 0, []
        namespaces = [self.link.namespaces[k] for k in ns_keys]
        r = self.link.guard("lookup", lambda: s.lookup_namespaces(
            namespaces, keys, lease=lease, lease_ttl_ms=self.cfg.lease_ttl_ms,
            promote=self.plans.lookups_promote), None)
        if r is None:
            return None
        if r.fast:
            self.stats.add("lookup_fast", 1)
        st.leases.extend((k, lease_id) for k, lease_id in zip(ns_keys, r.lease_ids) if lease_id)
        return r.hit_blocks, r.tiers

    def _lookup_groups(self, s: kvstrata.Session, st: RequestState, keys: List[bytes], start_u: int,
                       num_tokens: int, lease: bool) -> Optional[Tuple[int, List[int], int]]:
        """The hit (leading units) every KV cache group can serve, each unit's tier, and the
        leading units every group holds (not stored again).

        Full-attention groups need every unit of the hit. A sliding-window group needs only
        the units holding the tokens its window reads after the hit (vLLM points its blocks
        before those at the null block): when one of them is missing, the hit ends before
        it and the windows are asked again (at most _WINDOW_ROUNDS times).

        With a sliding-window group, the hit never covers the block of the prompt's last
        token (it ends at or before token num_tokens - 1, on a block boundary): vLLM's own
        prefix hit of the same prompt, next time, ends there (it leaves at least the last
        token to compute) and its sliding-window group then needs the window of blocks
        before that boundary. A load ending one token short of the prompt's end never
        allocates the first of those blocks (it lies outside that request's window), so the
        prompt would never be vLLM's own GPU hit again (tests/e2e/vllm/test_hybrid.py)."""
        full = [g for g in self.groups if not g.sliding_window]
        windowed = [g for g in self.groups if g.sliding_window]
        hit, tiers = len(keys), [0] * len(keys)
        # From the last unit vLLM holds (its key names the whole prefix): when KVStrata
        # holds it, the units before it count as held (not stored again) without asking --
        # a turn of a long conversation asks for its new units, not its whole context. When
        # it does not (e.g. a restarted daemon), the lookup starts again at unit 0.
        probe = max(0, start_u - 1)
        if full:  # Every full-attention group's every rank of every stage, in one round trip.
            ns_keys = [k for g in full for k in self._ns_keys(g.index)]
            found = self._lookup_chain(s, st, ns_keys, keys[probe:hit], lease)
            if found is not None and probe and found[0] == 0:
                found = self._lookup_chain(s, st, ns_keys, keys[:hit], lease)
            elif found is not None and probe:
                found = (probe + found[0], [kvstrata.Tier.L1] * probe + found[1])
            if found is None:
                return None
            hit, tiers = found
        if not windowed:
            return hit, tiers[:hit], hit
        # The windows are asked through `present` too (the same round trip), so a unit the
        # cap leaves out of the hit is not stored again when every group holds it.
        present, hit = hit, min(hit, (num_tokens - 1) // self.unit_tokens)
        for _ in range(_WINDOW_ROUNDS):
            shrunk = False
            for g in windowed:
                computed = min(hit * self.unit_tokens, num_tokens - 1)
                first = max(start_u, g.first_needed_token(computed) // self.unit_tokens)
                if hit <= first:
                    return hit, tiers[:hit], hit
                found = self._lookup_chain(s, st, self._ns_keys(g.index),
                                           keys[first:max(hit, present)], lease)
                if found is None:
                    return None
                n, t = found
                for i, tier in enumerate(t[:hit - first]):
                    tiers[first + i] = max(tiers[first + i], tier)
                present = min(present, first + n)
                if first + n < hit:
                    hit, shrunk = first + n, True
            if not shrunk:
                return hit, tiers[:hit], present
        return min(hit, start_u), tiers[:min(hit, start_u)], min(hit, start_u)  # never settled

    def _in_step_allowed(self) -> bool:
        """Whether an L1 load may run in the step that uses it (config.LOAD_MODES); only
        from L1 (a disk read in the engine's step would stall it). A hybrid model's loads
        are asynchronous: the layer-wise load serves one KV cache group, and vLLM takes a
        hybrid model's failed loads only per request, for a request that waits."""
        mode = self.cfg.load_mode
        if mode == "async" or (mode == "auto" and self.host_mode):
            return False
        return not self.hybrid  # a failed load is reported per request (take_failed_recving)

    def hit_sources(self, request: Any, num_external_tokens: int) -> Dict[str, int]:
        """Tokens of the external hit by tier: "host" (L1, DRAM) or "disk" (L2/L3)."""
        st = self._reqs.get(request.request_id)
        if st is None or num_external_tokens <= 0:
            return {}
        return st.hit_sources(self.unit_tokens, num_external_tokens)

    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
        st = self._reqs.get(request.request_id)
        if st is None:
            return
        if num_external_tokens <= 0 or st.plan is None:
            st.keys = None
            if not st.loading:
                self._release(st)
            st.plan = None
            return
        local, u0, u1 = st.plan
        st.plan = None
        first_block = local // self.block_size
        # Whole blocks of the hit; the block of the last token too when the hit reaches it
        # (num_external_tokens then stops one token short of it).
        end_tokens = local + num_external_tokens
        if end_tokens == request.num_tokens - 1 and u1 * self.unit_tokens == request.num_tokens:
            end_tokens += 1
        keys = st.keys[u0:u1] if st.keys is not None and len(st.keys) >= u1 else \
            self._keys(request.block_hashes, u0, u1)
        st.keys = None
        transfers: List[RequestTransfer] = []
        for g, block_ids in zip(self.groups, blocks.get_block_ids()):
            units = load_units(block_ids, keys, u0, u1, first_block,
                               min(end_tokens // self.block_size, len(block_ids)),
                               self.blocks_per_unit)
            if units:
                transfers.append(RequestTransfer(request.request_id, units, sync=st.sync,
                                                 group=g.index,
                                                 give_up=None if st.sync else st.give_up))
        if transfers:
            self._hand_leases(st, transfers)
            self._loads.extend(transfers)
            st.loading = True
            st.load_span = (u0, u1)
            self.plans.load_started(st, u0, u1,
                                    lambda: self._keys(request.block_hashes, 0, u1))
            st.load_blocks = {b for r in transfers for u in r.units for b in u.block_ids
                              if b >= 0}
            trace.event("alloc", request.request_id, units=sum(len(r.units) for r in transfers))
        else:
            self._release(st)

    def _hand_leases(self, st: RequestState, transfers: List[RequestTransfer]) -> None:
        """Each rank's lease of a transfer's group goes with the transfer: that rank's load
        consumes it (one per namespace; an MLA group's namespace is every rank's of a stage,
        so its lease stays here and is released)."""
        for r in transfers:
            if self.groups[r.group].replicated:
                continue
            kept = []
            for (g, rank), lease_id in st.leases:
                if g == r.group and rank not in r.leases:
                    r.leases[rank] = lease_id
                else:
                    kept.append(((g, rank), lease_id))
            st.leases = kept

    # ------------------------------------------------------------------ stores

    def _store_cap(self, st: RequestState) -> Optional[int]:
        req = st.request
        if req.num_prompt_tokens < self.cfg.store_threshold_tokens:
            return 0
        try:
            return max_offload_tokens(getattr(req, "kv_transfer_params", None))
        except ValueError as err:
            log.warning("kvstrata_vllm: request %s: %s; not storing it", req.request_id, err)
            return 0

    def _plan_store(self, req_id: str, computed_before: int, computed_after: int,
                    meta: KVStrataMetadata) -> None:
        st = self._reqs.get(req_id)
        if st is None:
            return
        req = st.request
        if st.stored_units is None:
            # Units KVStrata held at the lookup are not stored again (the prompt's last full
            # unit too, which no hit loads); vLLM's other local hits are (they may never
            # have been stored). The cap is read once.
            st.stored_units = st.present_units
            st.store_cap = self._store_cap(st)
        limit = req.num_prompt_tokens if self.cfg.offload == "prompt" else req.num_tokens
        limit = min(limit, computed_after, len(req.block_hashes) * self.hash_tokens)
        if st.store_cap is not None:
            limit = min(limit, st.store_cap)
        n_units = limit // self.unit_tokens
        if n_units <= st.stored_units:
            return
        bpu = self.blocks_per_unit
        if not st.block_ids or any(len(ids) < n_units * bpu for ids in st.block_ids):
            return
        first = st.stored_units
        keys = self._keys(req.block_hashes, first, n_units)
        for g, block_ids in zip(self.groups, st.block_ids):
            # A sliding-window group stores only units this step computed: vLLM may have
            # freed (and handed out again) the blocks of older ones, and a null block (0)
            # is a unit outside the window.
            oldest = computed_before // self.unit_tokens if g.sliding_window else 0
            units = [UnitTransfer(keys[i], list(block_ids[u * bpu:(u + 1) * bpu]))
                     for i, u in enumerate(range(first, n_units))
                     if u >= oldest and all(b > 0 for b in block_ids[u * bpu:(u + 1) * bpu])]
            if units:
                meta.stores.append(RequestTransfer(req_id, units, group=g.index))
        st.stored_units = n_units
        st.had_stores = True
        if self.events_enabled:
            tokens = req.all_token_ids
            for i, u in enumerate(range(first, n_units)):
                parent = keys[i - 1] if i > 0 else (
                    self._keys(req.block_hashes, u - 1, u)[0] if u > 0 else None)
                self.events.planned(keys[i], tokens[u * self.unit_tokens:(u + 1) *
                                                    self.unit_tokens],
                                    parent, getattr(req, "lora_request", None))

    def build_connector_meta(self, so: Any) -> KVStrataMetadata:
        meta = KVStrataMetadata(loads=self._loads, delayed_frees=self._delayed,
                                preempted=set(getattr(so, "preempted_req_ids", None) or ()),
                                finished=set(getattr(so, "finished_req_ids", None) or ()))
        self._loads, self._delayed = [], set()
        for st in self._sync_last:
            self._release(st)  # its load ends with its time (plans.worker_output) or the request
        self._sync_last = []
        if len({r.req_id for r in meta.loads if r.sync}) > 1:
            # The workers load these in one layer-wise job, which consumes no lease: the
            # leases stay with their requests and are released with them (_sync_last).
            for r in meta.loads:
                st = self._reqs.get(r.req_id)
                if r.sync and st is not None:
                    st.leases.extend(((r.group, rank), lease_id)
                                     for rank, lease_id in r.leases.items())
                    r.leases = {}
        for r in meta.loads:
            st = self._reqs.get(r.req_id)
            if r.sync and st is not None:
                st.loading = False  # Running in this step; load_blocks kept for the errors.
                self._sync_last.append(st)
        self._track_blocks(so)
        meta.step = self.plans.step_built(so, clean=not any(r.sync for r in meta.loads))
        if not so.total_num_scheduled_tokens and any(st.loading for st in self._reqs.values()):
            meta.idle_wait_ms = self.plans.idle_wait_ms()  # sized by the loads' predictions
        if any(g.sliding_window for g in self.groups):
            meta.new_blocks = _allocated_blocks(so)
        for new in so.scheduled_new_reqs:
            n = so.num_scheduled_tokens.get(new.req_id, 0)
            self._plan_store(new.req_id, new.num_computed_tokens, new.num_computed_tokens + n,
                             meta)
        cached = so.scheduled_cached_reqs
        for i, req_id in enumerate(cached.req_ids):
            before = cached.num_computed_tokens[i]
            self._plan_store(req_id, before, before + so.num_scheduled_tokens.get(req_id, 0),
                             meta)
        if meta.stores:
            self.stats.add("store_units_planned", sum(len(r.units) for r in meta.stores))
        return meta

    def _track_blocks(self, so: Any) -> None:
        """Each request's block ids, as the model runner learns them from SchedulerOutput
        (vLLM 0.26 and 0.33 alike, no KV cache manager binding): a new request brings all
        of them, a running one appends its new blocks, a resumed one replaces them."""
        for new in so.scheduled_new_reqs:
            st = self._reqs.get(new.req_id)
            if st is not None:
                st.block_ids = [list(ids) for ids in new.block_ids or ()]
        cached = so.scheduled_cached_reqs
        resumed = getattr(cached, "resumed_req_ids", None)
        if resumed is None:  # older vLLM: one flag per request
            flags = getattr(cached, "resumed_from_preemption", None) or ()
            resumed = {r for r, f in zip(cached.req_ids, flags) if f}
        for i, req_id in enumerate(cached.req_ids):
            st = self._reqs.get(req_id)
            new_ids = cached.new_block_ids[i]
            if st is None:
                continue
            if req_id in resumed or not st.block_ids:
                st.block_ids = [list(ids) for ids in new_ids or ()]
            elif new_ids:
                for ids, more in zip(st.block_ids, new_ids):
                    ids.extend(more)

    # ------------------------------------------------------------------ results

    def update_connector_output(self, output: Any) -> None:
        wm = getattr(output, "kv_connector_worker_meta", None)
        if isinstance(wm, KVStrataWorkerMetadata):
            self.plans.worker_output(wm.step, wm.loads)
            self.plans.gave_up(wm.gave_up, self._reqs, self.unit_tokens, lambda st: self._keys(
                st.request.block_hashes, 0, st.load_span[1]))
        invalid = set(getattr(output, "invalid_block_ids", None) or ())
        if invalid:
            for st in self._reqs.values():
                if (st.loading or st.sync) and st.load_blocks & invalid:
                    st.load_failed = True
                    self.plans.load_ended(st, failed=True)
        for req_id in getattr(output, "failed_recving", None) or ():  # hybrid models
            st = self._reqs.get(req_id)
            if st is not None:
                st.load_failed = True
                self.plans.load_ended(st, failed=True)
        for req_id in output.finished_recving or ():
            trace.event("load_reported", req_id)
            st = self._reqs.get(req_id)
            if st is not None:
                st.loading = False
                st.load_blocks = set()
                self._release(st)
                self.plans.load_ended(st)
        self.plans.censor_loads(wm.step if isinstance(wm, KVStrataWorkerMetadata) else 0)
        if isinstance(wm, KVStrataWorkerMetadata) and self.events_enabled:
            self.events.stored(wm.stored)

    def request_finished(self, request: Any, block_ids: Any) -> Tuple[bool, None]:
        """vLLM's request_finished (one group: block_ids a list) and
        request_finished_all_groups (a tuple of lists): the answer is the same."""
        st = self._reqs.pop(request.request_id, None)
        if st is None:
            return False, None
        self._release(st)
        self.plans.load_ended(st)
        # Host mode copies a block out during wait_for_save: nothing to wait for. The daemon
        # copies GPU blocks itself, so they stay allocated until its stores completed.
        delay = not self.host_mode and st.had_stores
        if delay:
            self._delayed.add(request.request_id)
        return delay, None

    def take_events(self) -> List[Any]:
        return self.events.take(self._poll_events) if self.events_enabled else []

    def _poll_events(self) -> Optional[List[Any]]:
        """The daemon's new KV event batches on rank 0's namespace of KV cache group 0
        (every rank's and group's unit has the same key); None without a session."""
        namespaces = self._namespaces(EVENT_GROUP)
        s = self.link.session()
        if namespaces is None or s is None:
            return None
        return s.poll_events(namespaces[0])

    def shutdown(self) -> None:
        for st in list(self._reqs.values()):
            self._release(st)
        self.plans.close()
        self.releaser.close()
        self.link.close()


def _allocated_blocks(so: Any) -> Set[int]:
    """The blocks this step's SchedulerOutput hands to requests, every group's: a store
    still reading one of them (a sliding-window block vLLM freed) must end first."""
    out: Set[int] = set()
    for new in so.scheduled_new_reqs:
        for ids in new.block_ids or ():
            out.update(ids)
    for new_ids in so.scheduled_cached_reqs.new_block_ids:
        for ids in new_ids or ():
            out.update(ids)
    out.discard(0)
    return out
