"""staged_get: a planned get of pages partly below L1 (a disk), loaded as its pages reach L1
and given up at its deadline (kvstrata.planning.GiveUp), so a tier slower than the planner
predicted never holds SGLang's prefetch past the point where computing the rest would have
been as fast.

batch_exists answered the pages worth prefetching, priced at the tiers' measured speeds
(planner.py); a get of pages below L1 would wait inside the daemon for their promotions
(BeginLoad, up to its promotion_wait) whatever they then cost. Instead the get takes a lease
on its pages (the daemon starts promoting the ones below L1 into L1), loads the leading
pages already in L1, asks the daemon (a lookup without a lease, 5-50 ms apart: about 8
times over the time waited) which of the next pages have landed and loads each new leading
run -- until every page is loaded, or the time since the get started reaches the deadline
for the pages landed so far: then the rest answer False. SGLang counts the pages up to the
first False as fetched and computes the others (HiCacheController._page_get_zero_copy, 0.5.17
and 0.5.23 alike). The lease is released at the end; promotions it started go on in the
daemon (the next request finds the pages in L1).

Called from SGLang's prefetch I/O thread (which waits here as it waited in the daemon).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, List

import kvstrata
from kvstrata.planning import GiveUp

POLL_S = 0.005
POLL_MAX_S = 0.05
_L1 = int(kvstrata.Tier.L1)


@dataclass
class StagedGet:
    ok: List[bool]          # per page: loaded
    landed: int             # leading pages loaded (or whose load was tried)
    gave_up: bool           # stopped at the deadline
    waited_ms: float
    deadline_ms: float      # the deadline in force when it ended


def staged_load(session: kvstrata.Session, ns: kvstrata.RegisteredNamespace, keys: List[bytes],
                load: Callable[[int, int], List[bool]], give_up: GiveUp) -> StagedGet:
    """Load `keys` as they reach L1 (load(lo, hi): pages [lo, hi), in L1 now, into their
    host pages; their per-page result), giving up at `give_up`'s deadline."""
    n = len(keys)
    ok = [False] * n
    started = time.monotonic()
    ttl = int(max(1000.0, give_up.points[-1][1] + 1000.0))
    lease = session.lookup(ns, keys, lease=True, lease_ttl_ms=ttl).lease_id
    landed = 0
    try:
        while landed < n:
            now = time.monotonic()
            r = session.lookup(ns, keys[landed:])
            ready = 0
            while ready < r.hit_blocks and int(r.tiers[ready]) == _L1:
                ready += 1
            if ready:
                got = load(landed, landed + ready)
                ok[landed:landed + ready] = got
                landed += ready
                if not all(got):
                    break       # SGLang stops at the first page not loaded
                continue
            waited = (time.monotonic() - started) * 1e3
            deadline = give_up.deadline_ms(landed)
            if r.hit_blocks == 0 or waited >= deadline:
                return StagedGet(ok, landed, r.hit_blocks > 0, waited, deadline)
            every = min(POLL_MAX_S, max(POLL_S, (now - started) / 8))
            time.sleep(max(0.0, min(every, (deadline - waited) / 1e3)))
    finally:
        if lease:
            try:
                session.release_leases([lease])
            except kvstrata.KVStrataError:
                pass    # it expires by itself
    waited = (time.monotonic() - started) * 1e3
    return StagedGet(ok, landed, False, waited, give_up.deadline_ms(landed))
