"""StagedLoads: an asynchronous load with units below L1 (a disk), loaded as its units
reach L1 and given up at its deadline, so a tier slower than predicted never holds the
request past its recompute time.

The scheduler's lookup of the load's units took a lease, and with it the daemon started
promoting the units below L1 into L1 (they join the lease as they land; with the planner,
the first lookup promotes nothing and load_planning.promote_load asks again). A load job over such units would wait
inside the daemon for every promotion and then copy them all -- and could not be stopped:
its copies would still write the blocks after vLLM recomputed them (or gave them to another
request). So the worker never submits a unit that is not in L1 yet: it loads the leading
units already there at once, and then asks the daemon (a lookup without a lease of the
units not loaded yet, from get_finished: every engine step, with or without a forward
pass; at most every POLL_S, about 8 times over the time waited so far, at least every
POLL_MAX_S, and once more at the deadline) which of the next ones have landed since,
loading each new leading run through the data path as a load of its own (the last one
consumes the lookup's lease).

The load gives up when the time since it started reaches its deadline for the units landed
so far (RequestTransfer.give_up, kvstrata.planning.GiveUp: where stopping still gets the
first token no later than recomputing would have): the units not landed fail -- their
blocks are reported invalid, so vLLM keeps the leading part that landed and recomputes the
rest (kv_load_failure_policy "recompute"; the scheduler sends no deadline otherwise) -- the
lease is released (the promotions go on in the daemon: the next request finds the units in
L1), and the give-up goes to the scheduler (WorkerBook.gave_up), which counts it, traces it
and teaches the planner that the tier took at least this long. A unit that left every tier
(evicted meanwhile) or a daemon that cannot be asked fails the rest at once.

The request stays receiving (WorkerBook.staged) until the load is over and its copies have
landed. A load whose units were all in L1 at the first ask is an ordinary load (its one
part's time is sent); one that waited sends no time: its parts' times are L1 copies, and
the wait is seen only at the engine's steps (on vLLM's CPU build ~1.5 s apart), so the
scheduler's promotion watch times the tier instead (load_planning.load_started).
Not for same-step loads (they load L1 only) nor hybrid models (their loads are all or
nothing per request: the scheduler sends no deadline). Not thread-safe: the engine's thread
(start_load_kv, get_finished) only.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Set

import kvstrata

from .data_path import DataPath
from .metadata import RequestTransfer
from .worker_book import WorkerBook
from . import trace

log = logging.getLogger("kvstrata_vllm")
POLL_S = 0.005      # a staged load asks the daemon at most this often ...
POLL_MAX_S = 0.05   # ... and at least this often: about 8 times over the time it waited
_L1 = int(kvstrata.Tier.L1)


@dataclass
class _Staged:
    req: RequestTransfer
    started: float
    lease: int
    landed: int = 0          # leading units submitted (in L1 when asked; their copies run)
    asked: float = 0.0       # when the daemon was last asked
    over: bool = False       # every unit submitted, failed or given up
    waited: bool = False     # some unit was not in L1 when asked (no time is sent)


class StagedLoads:
    def __init__(self, book: WorkerBook) -> None:
        self.book = book
        self._loads: Dict[str, _Staged] = {}

    def __bool__(self) -> bool:
        return bool(self._loads)

    def idle_wait(self, wait_s: float) -> float:
        """How long a step without a forward pass may wait for the loads in flight
        (KVStrataMetadata.idle_wait_ms): while a staged load runs, at most POLL_S, so its
        asks and its deadline keep their pace."""
        return min(wait_s, POLL_S) if self._loads else wait_s

    def start(self, req: RequestTransfer, io: DataPath) -> None:
        """Take over an asynchronous load with a deadline (req.give_up)."""
        if req.req_id in self._loads:  # a second group's transfer: not staged (no hybrid)
            io.load(req)
            return
        with self.book.lock:
            self.book.staged.add(req.req_id)
        st = _Staged(req, time.monotonic(), self.book.take_lease(req))
        self._loads[req.req_id] = st
        self._step(st, io, time.monotonic(), ask=True)

    def poll(self, io: Optional[DataPath]) -> None:
        """Load what landed in L1 since the last ask; give up the loads past their deadline.
        io None (the worker was disabled): the units not loaded fail."""
        now = time.monotonic()
        for st in list(self._loads.values()):
            if st.over:
                continue
            if io is None:
                self._fail_rest(st)
            else:
                every = min(POLL_MAX_S, max(POLL_S, (now - st.started) / 8))
                self._step(st, io, now, ask=now - st.asked >= every)

    def settle(self, io: DataPath) -> None:
        """Loads that are over and whose copies have landed end: no longer held receiving."""
        done: List[_Staged] = []
        with self.book.lock:
            for st in self._loads.values():
                if st.over and not io.busy_locked("load", st.req.req_id):
                    done.append(st)
        for st in done:
            del self._loads[st.req.req_id]
            with self.book.lock:
                self.book.staged.discard(st.req.req_id)
                self.book.untimed.discard(st.req.req_id)

    def drop(self, finished: Set[str]) -> None:
        """Requests that finished (or were aborted) while their load waited: nothing more is
        loaded into their blocks (vLLM frees them once they are reported received)."""
        for req_id in finished & set(self._loads):
            st = self._loads[req_id]
            if not st.over:
                st.over = True
                self._release(st)
                with self.book.lock:
                    self.book.recved.add(req_id)

    # ------------------------------------------------------------------ internals

    def _step(self, st: _Staged, io: DataPath, now: float, ask: bool) -> None:
        units = st.req.units
        if ask:
            st.asked = now
            ready = self._ready(st)
            if ready is None:   # gone from every tier, or no daemon: the rest cannot come
                self._fail_rest(st)
                return
            if st.landed + ready < len(units) and not st.waited:
                st.waited = True   # its parts' times are not the load's (module doc)
                with self.book.lock:
                    self.book.untimed.add(st.req.req_id)
            if ready:
                self._submit(st, io, st.landed + ready)
            if st.landed >= len(units):
                st.over = True
                return
        give_up = st.req.give_up
        if give_up is None:
            return
        waited = (now - st.started) * 1e3
        deadline = give_up.deadline_ms(st.landed)
        if waited >= deadline:
            if not ask:  # what landed since the last ask may move the deadline: ask first
                self._step(st, io, now, ask=True)
            elif not st.over:
                self._give_up(st, waited, deadline)

    def _ready(self, st: _Staged) -> Optional[int]:
        """How many of the next units are in L1 now; None when the next one is in no tier
        (or the daemon cannot say)."""
        s, ns = self.book.session_and_ns(st.req.group)
        if s is None or ns is None:
            return None
        keys = [u.key for u in st.req.units[st.landed:]]
        r = self.book.link.guard("lookup", lambda: s.lookup(ns, keys, lease=False), None)
        if r is None or r.hit_blocks == 0:
            return None
        n = 0
        while n < r.hit_blocks and int(r.tiers[n]) == _L1:
            n += 1
        return n

    def _submit(self, st: _Staged, io: DataPath, end: int) -> None:
        """Load units [landed, end) (in L1): the last part takes the lookup's lease."""
        req = st.req
        last = end >= len(req.units)
        part = RequestTransfer(req.req_id, req.units[st.landed:end], group=req.group,
                               leases={self.book.rank: st.lease} if last and st.lease else {})
        if last:
            st.lease = 0
        first, st.landed = st.landed, end
        trace.event("staged_load", req.req_id, first=first, end=end, units=len(req.units))
        try:
            io.load(part)
        except Exception as err:  # noqa: BLE001 - a failed load is a recompute
            log.warning("kvstrata_vllm: load for %s failed: %s (recomputing)", req.req_id, err)
            self.book.fail_load(part, list(range(len(part.units))))

    def _fail_rest(self, st: _Staged, counter: str = "load_failed_units") -> None:
        """The units not landed fail (vLLM recomputes them); the load is over."""
        rest = RequestTransfer(st.req.req_id, st.req.units[st.landed:], group=st.req.group)
        st.over = True
        if rest.units:
            self.book.fail_load(rest, list(range(len(rest.units))), counter)
        self._release(st)

    def _give_up(self, st: _Staged, waited: float, deadline: float) -> None:
        req = st.req
        trace.event("load_gave_up", req.req_id, landed=st.landed, units=len(req.units),
                    ms=round(waited, 3), deadline_ms=round(deadline, 3))
        with self.book.lock:
            self.book.gave_up.append((req.req_id, st.landed, len(req.units), waited, deadline))
        self._fail_rest(st, "load_gave_up_units")

    def _release(self, st: _Staged) -> None:
        """The lookup's lease, unless a part took it: released (the promotions it started
        go on; what lands is simply in L1)."""
        lease, st.lease = st.lease, 0
        s = self.book.link.current if lease else None
        if s is not None:
            self.book.link.guard("release_leases", lambda: s.release_leases([lease]), None)
