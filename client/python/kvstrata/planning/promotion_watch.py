"""PromotionWatch: times the daemon's promotions from L2/L3 into L1, so a tier the planner
stopped loading from is still measured.

Two kinds of run are watched, one per tier at a time (its last unit's key, in one
namespace, and the bytes promoted over every namespace): a load's own promotions (`watch`:
the load's leased lookup started them; a staged load that gives up leaves them landing), and
a probe (`probe`): a hit the planner sends to recompute is looked up without promotion
(the engine stores what it computes, so reading the tier's copy too would be wasted disk
reads beside the recompute), so the watch promotes a few of its units itself -- at most
PROBE_BYTES, at most every PROBE_EVERY_S per tier, from its own thread (a leased lookup
whose leases it releases at once: the promotions go on) -- and times them. The watch asks
the daemon, every POLL_S without a lease, until the unit is in L1: the time since the
promotion started is a sample of the tier's speed, with the daemon's queue in front of it.
A unit still below L1 after TIMEOUT_S is a censored sample (a stalled tier); one that left
every tier is dropped. Past its prediction a watch counts as a censored sample (at least
this slow) as it goes on. A thread of its own does the polling and the probes' lookups;
the engine never waits for it.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ..tier import Tier

from .tier_speeds import TierSpeeds

POLL_S = 0.005
TIMEOUT_S = 10.0
PROBE_BYTES = 64 << 20   # a probe promotes at most this much (every namespace; one unit at least)
PROBE_EVERY_S = 1.0      # and starts at most this often per tier


class PromotionWatch:
    def __init__(self, link: Any, speeds: TierSpeeds,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.link = link   # the caller's kvstrata.DaemonLink
        self.speeds = speeds
        self._clock = clock
        self._lock = threading.Lock()
        self._cv = threading.Condition(self._lock)
        # tier -> (namespace, key, bytes, started at): one watch per tier at a time.
        self._watches: Dict[int, Tuple[Any, bytes, int, float]] = {}
        # tier -> (namespaces, keys, bytes): probes the thread starts next; tier -> when the
        # last probe of it started.
        self._probes: Dict[int, Tuple[List[Any], List[bytes], int]] = {}
        self._probed: Dict[int, float] = {}
        self._thread: Optional[threading.Thread] = None
        self._closed = False

    def watch(self, tier: int, namespace: Any, key: bytes, nbytes: int, started: float) -> bool:
        """Time the promotion of `key` from `tier` (started by a lookup at `started`); False
        when that tier is being watched already."""
        with self._lock:
            if self._closed or tier in self._watches:
                return False
            self._watches[tier] = (namespace, key, nbytes, started)
            self._start_locked()
            self._cv.notify()
        return True

    def probe(self, tier: int, namespaces: Sequence[Any], keys: Sequence[bytes],
              unit_bytes: int) -> int:
        """Promote the leading units of `keys` (a run of units held in `tier`, looked up
        without promotion; `unit_bytes`: a unit's bytes over every one of `namespaces`) up
        to PROBE_BYTES, and time it. Returns how many leading units it promotes -- the
        engine should not store those (its store could land first and end the watch with a
        time that is not the tier's) -- 0 (nothing started) when the tier is watched
        already, was probed less than PROBE_EVERY_S ago, or nothing is given."""
        if not keys or not namespaces:
            return 0
        units = max(1, min(len(keys), PROBE_BYTES // max(1, unit_bytes)))
        with self._lock:
            now = self._clock()
            last = self._probed.get(tier)
            if self._closed or tier in self._watches or tier in self._probes or \
                    (last is not None and now - last < PROBE_EVERY_S):
                return 0
            self._probed[tier] = now
            self._probes[tier] = (list(namespaces), list(keys[:units]), units * unit_bytes)
            self._start_locked()
            self._cv.notify()
        return units

    def _start_locked(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, daemon=True,
                                            name="kvstrata-promotion-watch")
            self._thread.start()

    def _start_probe(self, tier: int, namespaces: List[Any], keys: List[bytes],
                     nbytes: int) -> None:
        """A probe's promotion: a leased lookup (which starts it) whose leases end at once
        (the promotions go on), then watched."""
        s = self.link.session()
        if s is None:
            return
        started = self._clock()
        r = self.link.guard("lookup", lambda: s.lookup_namespaces(namespaces, keys, lease=True,
                                                                  promote=True), None)
        if r is None:
            return
        leases = [x for x in r.lease_ids if x]
        if leases:
            self.link.guard("release_leases", lambda: s.release_leases(leases), None)
        if r.hit_blocks < len(keys):
            return  # some unit left every tier meanwhile: its time would be no sample
        with self._lock:
            if not self._closed and tier not in self._watches:
                self._watches[tier] = (namespaces[0], keys[-1], nbytes, started)

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._watches and not self._probes and not self._closed:
                    self._cv.wait()
                if self._closed:
                    return
                probes, self._probes = self._probes, {}
            for tier, (namespaces, keys, nbytes) in probes.items():
                self._start_probe(tier, namespaces, keys, nbytes)
            with self._lock:
                watches = dict(self._watches)
            for tier, (ns, key, nbytes, started) in watches.items():
                done = self._check(tier, ns, key, nbytes, started)
                if done:
                    with self._lock:
                        self._watches.pop(tier, None)
            time.sleep(POLL_S)

    def _check(self, tier: int, ns: Any, key: bytes, nbytes: int, started: float) -> bool:
        s = self.link.session()
        if s is None:
            return True
        r = self.link.guard("lookup", lambda: s.lookup(ns, [key], lease=False), None)
        elapsed_ms = (self._clock() - started) * 1e3
        if r is None or r.hit_blocks == 0:
            return True  # gone from every tier (or the daemon is away): no sample
        # Past its prediction it is a censored sample (at least this slow), replaced as it
        # goes on and by its real time when it lands.
        key_id = f"promotion:{tier}:{started}"
        if int(r.tiers[0]) == int(Tier.L1):
            self.speeds.add(tier, nbytes, elapsed_ms, key=key_id)
            return True
        if elapsed_ms > self.speeds.predict_ms(tier, nbytes):
            self.speeds.add(tier, nbytes, elapsed_ms, key=key_id)
        return elapsed_ms >= TIMEOUT_S * 1e3

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._cv.notify()
            thread = self._thread
        if thread is not None:
            thread.join(1.0)
