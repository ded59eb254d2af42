"""The scheduler side's use of the load planner (kvstrata.planning): how much of a hit to
load and whether in the step that uses it, when an asynchronous load with units below L1
gives up (its deadlines, kvstrata.planning.GiveUp: the workers load it as its units reach
L1, staged_loads.py), and the timing of each load planned -- started, ended with the
workers' times (KVStrataWorkerMetadata.loads), counted as slow while it runs late, or
given up -- which teaches the planner each tier's speed; the prefill model learns each
step's work; and the compute queued in front of a request (the prefill still to run of the
requests that arrived before it), which a recompute waits for and a load runs beside. What
moves between the tiers follows the plan (lookups_promote off): the units a plan loads are
promoted from L2/L3 (promote_load), those it recomputes are stored by the engine, not read
from the disk, but for a bounded probe that keeps the tier measured (_probe_rest). On
for GPU engines unless turned off (config load_planner); without it every
hit loads, in the step that uses it when it is all in L1 and in-step loads are allowed.

Not thread-safe: the scheduler's thread only.
"""
from __future__ import annotations

import time
from bisect import bisect_left
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

import kvstrata
from kvstrata.planning import (CPU_FLOPS, GPU_FLOPS, LoadPlanner, Plan, PrefillModel,
                               PromotionWatch, TierSpeeds, give_up_schedule, overdue)

from .config import ConnectorConfig
from .model_flops import prefill_flops
from .request_state import RequestState
from .stats import StatsCounter
from . import trace


# How long the workers may wait, in a step without a forward pass, for the asynchronous loads
# in flight (KVStrataMetadata.idle_wait_ms): until the first one's predicted landing, with room
# (x 1.5, + 2 ms), at least IDLE_WAIT_MIN_MS (a load running late is polled at that pace) and
# at most IDLE_WAIT_MAX_MS -- the most without a prediction. The wait ends as soon as every
# load in flight landed (the workers wait for them all: sizing by the first keeps a quick load
# from waiting for a slow one's); only an engine with nothing else to run waits, and a request
# arriving meanwhile is scheduled at most that much later.
IDLE_WAIT_MIN_MS = 5.0
IDLE_WAIT_MAX_MS = 20.0


def _first_run_below_l1(tiers: List[Any], first: int, end: int) -> Optional[Tuple[int, int]]:
    """[u, run_end): the first run of units of one tier below L1 in [first, end); None when
    all of them are in L1."""
    u = first
    while u < end and tiers[u] == kvstrata.Tier.L1:
        u += 1
    if u >= end:
        return None
    run_end = u
    while run_end < end and tiers[run_end] == tiers[u]:
        run_end += 1
    return u, run_end


class LoadPlanning:
    def __init__(self, vllm_config: Any, cfg: ConnectorConfig, host_mode: bool, ranks: int,
                 link: kvstrata.DaemonLink, ns_keys: List[Any], stats: StatsCounter,
                 watch_namespaces: Callable[[], Optional[List[kvstrata.RegisteredNamespace]]],
                 request_states: Callable[[], Iterable[RequestState]] = lambda: ()) -> None:
        """ranks: the ranks that load a unit; ns_keys: the Link's keys of every namespace a
        unit loads into; watch_namespaces(): the namespaces whose promotions are timed;
        request_states(): the scheduler's requests not finished (the compute queue)."""
        self.link = link
        self.ns_keys = ns_keys
        self.stats = stats
        self.watch_namespaces = watch_namespaces
        self.planner: Optional[LoadPlanner] = None
        self.watch: Optional[PromotionWatch] = None
        if cfg.load_planner == "on" or (cfg.load_planner == "auto" and not host_mode):
            chunk = int(getattr(vllm_config.scheduler_config, "max_num_batched_tokens", 0) or
                        8192)
            prefill = PrefillModel(prefill_flops(vllm_config),
                                   CPU_FLOPS if host_mode else GPU_FLOPS, chunk)
            speeds = TierSpeeds(ranks=ranks)
            # A host-memory engine copies inside its own steps: a load does not run beside
            # the compute queued in front of it.
            self.planner = LoadPlanner(prefill, speeds, overlaps_compute=not host_mode)
            self.watch = PromotionWatch(link, speeds)
        # Whether the scheduler's leased lookups promote their hits below L1 (else it
        # promotes what a plan loads, and what is recomputed the engine stores: probe_rest).
        self.lookups_promote = True
        self.inflight: Dict[str, RequestState] = {}  # requests whose load is timed (load_info)
        self.steps = 0  # steps built (KVStrataMetadata.step)
        self.request_states = request_states
        # The compute queue as of a step: (step, arrival times sorted, running sums of
        # (tokens, FLOPs) to prefill in that order); built once per step built.
        self._backlog: Optional[Tuple[int, List[float], List[Tuple[int, float]]]] = None

    # ------------------------------------------------------------------ plans

    def plan(self, st: RequestState, request: Any, keys: List[bytes], start_u: int, hit: int,
             computed: int, unit_tokens: int, looked_up_at: float, in_step_ok: bool,
             partial_ok: bool, fresh: bool = True, deadline_ok: bool = False) -> int:
        """Where the load of the hit [start_u, hit) ends, st.sync, and st.give_up (an
        asynchronous load with units below L1, when `deadline_ok`: the engine recomputes
        the blocks of a load that gave up); counted (plan_<kind>) and traced once per
        lookup (`fresh`), not per reuse of its answer."""
        tiers = st.tiers[start_u:hit]
        st.give_up = None
        if self.planner is None:
            st.sync = in_step_ok and all(t == kvstrata.Tier.L1 for t in tiers)
            return hit
        unit_bytes = self.unit_bytes()
        plan: Plan = self.planner.plan(tiers, computed, unit_tokens, request.num_tokens,
                                       unit_bytes, in_step_ok=in_step_ok, partial_ok=partial_ok,
                                       backlog_ms=self.backlog_ms(request))
        if deadline_ok and not plan.in_step and \
                any(t != kvstrata.Tier.L1 for t in tiers[:plan.units]):
            st.give_up = give_up_schedule(self.planner.prefill, plan, tiers, computed,
                                          unit_tokens, request.num_tokens)
        if fresh:
            self.stats.add(f"plan_{plan.kind}", 1)
            trace.event("plan", request.request_id, kind=plan.kind, units=plan.units,
                        hit_units=len(tiers), load_ms=round(plan.load_ms, 3),
                        ttft_ms=round(plan.ttft_ms, 3), recompute_ms=round(plan.recompute_ms, 3),
                        backlog_ms=round(plan.backlog_ms, 3),
                        give_up_ms=round(st.give_up.deadline_ms(0), 3) if st.give_up else None)
        if plan.units < len(tiers) and fresh:
            self.stats.add("plan_unloaded_tokens", (len(tiers) - plan.units) * unit_tokens)
        if plan.units < len(tiers) and self.lookups_promote:
            if fresh:
                self._watch_promotion(st, keys, start_u + plan.units, hit, unit_bytes,
                                      looked_up_at)
        elif plan.units < len(tiers):
            self._probe_rest(st, keys, start_u + plan.units, hit, unit_bytes, fresh)
        st.sync = plan.in_step
        st.plan_pred = plan.load_ms
        return start_u + plan.units

    def promote_load(self, s: kvstrata.Session, st: RequestState, keys: List[bytes],
                     start_u: int, end: int, lease_ttl_ms: int,
                     release: Callable[[RequestState], None]) -> int:
        """The plan loads units [start_u, end) asynchronously and some sit below L1, which
        the lookup did not promote (lookups_promote off; one KV cache group): look them up
        again with a lease (`lease_ttl_ms`) that promotes them (they join it as they land;
        release(st) ends the lookup's leases), so a staged load finds them landing in L1
        and a load job's wait starts now. Returns where the load ends (sooner when units
        left every tier meanwhile)."""
        if self.lookups_promote or st.sync or end <= max(start_u, st.promoted_to) or \
                all(t == kvstrata.Tier.L1 for t in st.tiers[start_u:end]):
            return end
        namespaces = [self.link.namespaces[k] for k in self.ns_keys]
        r = self.link.guard("lookup", lambda: s.lookup_namespaces(
            namespaces, keys[start_u:end], lease=True, lease_ttl_ms=lease_ttl_ms), None)
        if r is None:
            return end  # the load promotes what it finds (a staged one fails what is missing)
        release(st)
        st.leases = [(k, lease_id) for k, lease_id in zip(self.ns_keys, r.lease_ids)
                     if lease_id]
        st.promoted_to = start_u + r.hit_blocks
        return min(end, st.promoted_to)

    def backlog_ms(self, request: Any) -> float:
        """The predicted compute queued in front of `request`: the prefill still to run
        (beyond what each has computed or is loading: RequestState.ready_tokens) of the
        requests that arrived before it. The queue is read once per step built; a request
        in its decode phase has none left."""
        if self.planner is None:
            return 0.0
        if self._backlog is None or self._backlog[0] != self.steps:
            rows = []
            for st in self.request_states():
                r = st.request
                done = max(r.num_computed_tokens, st.ready_tokens)
                left = r.num_tokens - 1 - done
                if left > 0:
                    rows.append((r.arrival_time, left, done))
            rows.sort()
            arrivals: List[float] = []
            sums: List[Tuple[int, float]] = []
            tokens, flops = 0, 0.0
            for arrival, left, done in rows:
                tokens += left
                flops += self.planner.prefill.work(left, done)
                arrivals.append(arrival)
                sums.append((tokens, flops))
            self._backlog = (self.steps, arrivals, sums)
        _, arrivals, sums = self._backlog
        ahead = bisect_left(arrivals, request.arrival_time)
        if ahead == 0:
            return 0.0
        tokens, flops = sums[ahead - 1]
        return self.planner.prefill.queue_ms(tokens, flops)

    def unit_bytes(self) -> int:
        """A unit's bytes over every namespace it loads into (all groups, all ranks)."""
        return sum(getattr(self.link.namespaces.get(key), "bytes_per_block", 0) or 0
                   for key in self.ns_keys)

    def _probe_rest(self, st: RequestState, keys: List[bytes], first: int, end: int,
                    unit_bytes: int, fresh: bool) -> None:
        """The units [first, end) will be recomputed, and the lookup promoted none of them
        (lookups_promote off): the engine stores them from the first one below L1 on
        (st.present_units; the daemon's write-down skips what L2/L3 hold already), but the
        leading units of that run a probe promotes (once per lookup, `fresh`), which times
        the tier (PromotionWatch.probe), so a tier priced out is still measured."""
        run = _first_run_below_l1(st.tiers, first, end)
        if run is None:
            return  # all in L1: held there, nothing to store
        u, run_end = run
        probed = 0
        namespaces = self.watch_namespaces() if fresh and self.watch is not None else None
        if namespaces:
            probed = self.watch.probe(int(st.tiers[u]), namespaces, keys[u:run_end], unit_bytes)
        st.present_units = min(st.present_units, u + probed)

    def _watch_promotion(self, st: RequestState, keys: List[bytes], first: int, end: int,
                         unit_bytes: int, started: float) -> None:
        """The units [first, end) were not loaded: the lookup's lease started promoting
        those below L1, which promotion_watch times (the first run of one tier)."""
        namespaces = self.watch_namespaces()
        if self.watch is None or not namespaces:
            return
        run = _first_run_below_l1(st.tiers, first, end)
        if run is None:
            return
        u, run_end = run
        self.watch.watch(int(st.tiers[u]), namespaces[0], keys[run_end - 1],
                         (run_end - u) * unit_bytes, started)

    # ------------------------------------------------------------------ steps

    def step_built(self, so: Any, clean: bool) -> int:
        """A step was built from SchedulerOutput `so`: its number (0 without a planner), its
        work for the prefill model (each request's new tokens and context) and its size for
        the in-step decision. clean: no load runs in it."""
        if self.planner is None:
            return 0
        self.steps += 1
        work = [(so.num_scheduled_tokens.get(new.req_id, 0), new.num_computed_tokens)
                for new in so.scheduled_new_reqs]
        cached = so.scheduled_cached_reqs
        work += [(so.num_scheduled_tokens.get(r, 0), cached.num_computed_tokens[i])
                 for i, r in enumerate(cached.req_ids)]
        self.planner.prefill.step_built(self.steps, work, clean)
        self.planner.batch_requests = len(work)
        return self.steps

    def worker_output(self, step: int, loads: List[Tuple[Tuple[str, ...], float]]) -> None:
        """The workers' output (KVStrataWorkerMetadata): the step it ends, the loads timed."""
        if self.planner is None:
            return
        if step:
            self.planner.prefill.step_done(step)
        if loads:
            self._load_times(loads)

    # ------------------------------------------------------------------ load timing

    def load_started(self, st: RequestState, u0: int, u1: int,
                     keys_of: Optional[Callable[[], List[bytes]]] = None) -> None:
        """st's load of units [u0, u1) starts. A staged load (st.give_up: the workers load
        its units as they reach L1) sends no time when it waits; the promotion watch times
        its first run below L1 instead (keys_of(): the request's unit keys from unit 0)."""
        if self.planner is None or u1 <= u0:
            return
        if st.give_up is not None and not st.sync and keys_of is not None:
            self._watch_promotion(st, keys_of(), u0, u1, self.unit_bytes(),
                                  st.answer[1] if st.answer else time.monotonic())
        tier = int(max(st.tiers[u0:u1]))
        nbytes = (u1 - u0) * self.unit_bytes()
        # An in-step load runs in the next step built (build_connector_meta numbers it).
        # Its time will include the bytes ahead of it (the planner predicts it so): a sample
        # counts them too, so a tier's speed is not its queue's.
        st.load_info = (tier, nbytes, time.monotonic(), st.plan_pred,
                        self.steps + 1 if st.sync else 0, self.planner.queued(tier))
        self.planner.queue(tier, nbytes)
        self.inflight[st.request.request_id] = st

    def idle_wait_ms(self) -> float:
        """The wait of a step without a forward pass for the asynchronous loads in flight
        (see IDLE_WAIT_MIN_MS): a 32K-token L1 hit of gpt-oss's layers took 5.4 ms on an
        H200, past a fixed 5 ms, and its request ran a step later."""
        left = self.landing_in_ms()
        if left is None:
            return IDLE_WAIT_MAX_MS
        return min(IDLE_WAIT_MAX_MS, max(IDLE_WAIT_MIN_MS, 1.5 * left + 2.0))

    def landing_in_ms(self) -> Optional[float]:
        """How long until the first asynchronous load in flight lands, as the planner
        predicted it (ms from now; <= 0 once overdue); None without a prediction (no
        planner, or no asynchronous load timed)."""
        if self.planner is None:
            return None
        ends = [info[2] + info[3] / 1e3 for st in self.inflight.values()
                if (info := st.load_info) is not None and not info[4]]
        return (min(ends) - time.monotonic()) * 1e3 if ends else None

    def load_ended(self, st: RequestState, ms: Optional[float] = None,
                   failed: bool = False) -> None:
        """The load of st is over; `ms`: its time as the daemon measured it. An
        asynchronous load that `failed` well past its prediction is a censored sample (the
        tier took at least that long for its bytes): a load whose lease ended while it
        waited behind a slow disk teaches the planner as a slow load does, not nothing."""
        info, st.load_info = st.load_info, None
        self.inflight.pop(st.request.request_id, None)
        if info is None or self.planner is None:
            return
        tier, nbytes, started, predicted, in_step, ahead = info
        self.planner.queue(tier, -nbytes)
        if ms is None and failed:
            # An in-step load's time is its step's, not the tier's: only a load that ran
            # before its request's step says how slow the tier was.
            elapsed = (time.monotonic() - started) * 1e3
            if not in_step and overdue(elapsed, predicted):
                self.planner.tiers.add(tier, nbytes + ahead, elapsed, key=st.request.request_id)
                trace.event("load_failed_time", st.request.request_id, tier=tier, bytes=nbytes,
                            predicted_ms=round(predicted, 3), at_least_ms=round(elapsed, 3))
            return
        if ms is not None:
            self.planner.tiers.add(tier, nbytes + ahead, ms, key=st.request.request_id)
            trace.event("load_time", st.request.request_id, tier=tier, bytes=nbytes,
                        predicted_ms=round(predicted, 3), ms=round(ms, 3))

    def gave_up(self, reports: List[Tuple[str, int, int, float, float]],
                states: Dict[str, RequestState], unit_tokens: int,
                keys_of: Callable[[RequestState], List[bytes]]) -> None:
        """Loads that gave up at their deadline (KVStrataWorkerMetadata.gave_up, one report
        per rank: the fewest units landed, the longest wait count): no second attempt at
        the hit (vLLM recomputes what did not land); load_gave_up for each. keys_of(st):
        the request's unit keys from unit 0."""
        merged: Dict[str, Tuple[int, int, float, float]] = {}
        for req_id, landed, units, ms, deadline in reports:
            old = merged.get(req_id)
            merged[req_id] = (landed, units, ms, deadline) if old is None else \
                (min(old[0], landed), units, max(old[2], ms), deadline)
        for req_id, (landed, units, ms, deadline) in merged.items():
            st = states.get(req_id)
            if st is not None and not st.gave_up:  # once: the ranks may report in turn
                st.load_failed = st.gave_up = True
                self.load_gave_up(st, keys_of(st), landed, units, ms, deadline, unit_tokens)

    def load_gave_up(self, st: RequestState, keys: List[bytes], landed: int, units: int,
                     ms: float, deadline_ms: float, unit_tokens: int) -> None:
        """st's load gave up at its deadline after `ms` with `landed` of its `units` units
        landed (the workers' report, KVStrataWorkerMetadata.gave_up; keys: the request's
        unit keys from unit 0): counted, traced, a censored sample of its tier (at least
        `ms` for its bytes), and the units not landed watched as they reach L1 (the tier
        is measured while the planner prices it out)."""
        info, st.load_info = st.load_info, None
        self.inflight.pop(st.request.request_id, None)
        self.stats.add("load_gave_up", 1)
        self.stats.add("load_gave_up_tokens", (units - landed) * unit_tokens)
        if info is None or self.planner is None:
            return
        tier, nbytes, started, predicted, _, ahead = info
        self.planner.queue(tier, -nbytes)
        self.planner.tiers.add(tier, nbytes + ahead, ms, key=st.request.request_id)
        trace.event("load_gave_up", st.request.request_id, tier=tier, bytes=nbytes,
                    predicted_ms=round(predicted, 3), at_least_ms=round(ms, 3),
                    deadline_ms=round(deadline_ms, 3), landed=landed, units=units)
        first, end = st.load_span
        self._watch_promotion(st, keys, first + landed, end, self.unit_bytes(),
                              st.answer[1] if st.answer else started)

    def _load_times(self, timed: List[Tuple[Tuple[str, ...], float]]) -> None:
        """The workers' load job times (KVStrataWorkerMetadata.loads): one sample per job,
        the slowest rank's time, its requests' bytes together."""
        slowest: Dict[Tuple[str, ...], float] = {}
        for req_ids, ms in timed:
            slowest[req_ids] = max(ms, slowest.get(req_ids, 0.0))
        for req_ids, ms in slowest.items():
            sts = [self.inflight[r] for r in req_ids if r in self.inflight]
            infos = [st.load_info for st in sts if st.load_info is not None]
            if not infos or self.planner is None:
                continue
            if len(sts) == 1:
                self.load_ended(sts[0], ms)
                continue
            tier = max(i[0] for i in infos)
            self.planner.tiers.add(tier, sum(i[1] for i in infos) + min(i[5] for i in infos), ms,
                                   key=req_ids[0])
            for st in sts:
                self.load_ended(st)

    def censor_loads(self, step_done: int) -> None:
        """Loads running well past their prediction count as at least that slow now. An
        in-step load is over with its step's output (`step_done`): one the workers sent no
        time for (it failed) ends untimed."""
        if self.planner is None:
            return
        now = time.monotonic()
        for req_id, st in list(self.inflight.items()):
            if st.load_info is None:
                continue
            tier, nbytes, started, predicted, in_step, ahead = st.load_info
            if in_step:
                if step_done and in_step <= step_done:
                    self.load_ended(st)
                continue
            ms = (now - started) * 1e3
            if overdue(ms, predicted):
                self.planner.tiers.add(tier, nbytes + ahead, ms, key=req_id)

    def close(self) -> None:
        if self.watch is not None:
            self.watch.close()

