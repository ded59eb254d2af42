"""PromotionWatch: times the daemon's background promotions, so a tier the planner stopped
loading from is still measured.

A lookup with a lease starts promoting the hit's units that sit below L1 (L2, L3) into L1,
whether or not the request then loads them; a request the planner sends to recompute
leaves them landing there for the next one. The watch takes one such run of units per tier
at a time (its last unit's key, in one namespace, and the bytes promoted over every
namespace) and asks the daemon, every POLL_S without a lease, until that unit is in L1:
the time since the lookup is a sample of the tier's speed, with the daemon's queue in
front of it. A unit still below L1 after TIMEOUT_S is a censored sample (a stalled tier);
one that left every tier is dropped. Past its prediction a watch counts as a censored
sample (at least this slow) as it goes on. A thread of its own does the polling; the
engine never waits for it.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, Dict, Optional, Tuple

from ..tier import Tier

from .tier_speeds import TierSpeeds

POLL_S = 0.005
TIMEOUT_S = 10.0


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
        self._thread: Optional[threading.Thread] = None
        self._closed = False

    def watch(self, tier: int, namespace: Any, key: bytes, nbytes: int, started: float) -> bool:
        """Time the promotion of `key` from `tier` (started by a lookup at `started`); False
        when that tier is being watched already."""
        with self._lock:
            if self._closed or tier in self._watches:
                return False
            self._watches[tier] = (namespace, key, nbytes, started)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name="kvstrata-promotion-watch")
                self._thread.start()
            self._cv.notify()
        return True

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._watches and not self._closed:
                    self._cv.wait()
                if self._closed:
                    return
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
