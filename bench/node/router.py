"""The node benchmark's router: which replica serves a request.

The router lives in the load generator (one process sends every request), so it sees every
request in flight exactly and adds no proxy hop to the measured times. Modes:
  rr      round-robin over the replicas, request by request
  least   the replica with the fewest requests in flight (ties: the next one after the last
          pick, so that an idle node still spreads)
  sticky  a conversation stays on one replica; its first request goes to the replica with
          the fewest conversations so far (ties: the lowest index)

A replica marked dead (mark_dead: faults.py kills one) gets no request until marked alive
again: rr and least skip it, and sticky moves a conversation whose home is dead to the live
replica with the fewest conversations (counted in `rehomed`).
"""
from __future__ import annotations

from typing import Dict, List, Set

MODES = ("rr", "least", "sticky")


class Router:
    def __init__(self, mode: str, replicas: int) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown routing mode {mode!r} (one of {', '.join(MODES)})")
        if replicas < 1:
            raise ValueError(f"replicas must be >= 1, got {replicas}")
        self.mode = mode
        self.replicas = replicas
        self.in_flight: List[int] = [0] * replicas
        self.sent: List[int] = [0] * replicas
        self._next = 0
        self._home: Dict[str, int] = {}
        self._homed: List[int] = [0] * replicas
        self.dead: Set[int] = set()
        self.rehomed = 0  # sticky conversations moved off a dead replica

    def mark_dead(self, replica: int) -> None:
        self.dead.add(replica)

    def mark_alive(self, replica: int) -> None:
        self.dead.discard(replica)

    def live(self) -> List[int]:
        return [i for i in range(self.replicas) if i not in self.dead]

    def home(self, conv_id: str) -> int:
        """A sticky conversation's replica (-1 before its first request)."""
        return self._home.get(conv_id, -1)

    def acquire(self, conv_id: str) -> int:
        """The replica for the next request of conv_id; counted in flight until release.
        RuntimeError when every replica is dead."""
        live = self.live()
        if not live:
            raise RuntimeError("no live replica to route to")
        if self.mode == "rr":
            order = [(self._next + k) % self.replicas for k in range(self.replicas)]
            r = next(i for i in order if i not in self.dead)
            self._next = (r + 1) % self.replicas
        elif self.mode == "least":
            order = [(self._next + k) % self.replicas for k in range(self.replicas)]
            r = min((i for i in order if i not in self.dead), key=lambda i: self.in_flight[i])
            self._next = (r + 1) % self.replicas
        else:
            r = self._home.get(conv_id, -1)
            if r in self.dead:
                self._homed[r] -= 1
                self.rehomed += 1
                r = -1
            if r < 0:
                r = min(live, key=lambda i: self._homed[i])
                self._home[conv_id] = r
                self._homed[r] += 1
        self.in_flight[r] += 1
        self.sent[r] += 1
        return r

    def release(self, replica: int) -> None:
        if self.in_flight[replica] <= 0:
            raise RuntimeError(f"release of replica {replica} with nothing in flight")
        self.in_flight[replica] -= 1
