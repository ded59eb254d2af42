"""JobPace: when a job's completion is due, learned from the jobs before it.

A thread that waits for a job frame's completion and reads the job socket itself (kvstrata.jobs,
CompletionTracker.wait) sleeps in poll() until shortly before the job is due, then polls without
sleeping until the completion came or a limit passed (hybrid polling, as the daemon's lane does
for the GPU's events): a thread that slept through the job wakes on a cold CPU, ~0.1 ms later
than one that was running (bench/results/h100-2026-11-26-fourteenth/NOTES.md, "A waiting thread
that reads its own completions"). The pace per job kind is the fastest time per block seen from
a frame's sending to its completion filed; it drifts slower when jobs get slower, so one fast
job does not keep later waits polling early. Jobs of fewer blocks take longer per block (their
fixed costs), so their polling starts early rather than late. read_turn is one such read: asleep
in poll() until shortly before the job is due, then without sleeping.

Not thread-safe: its owner (the CompletionTracker) calls it under its lock.
"""
from __future__ import annotations

import math
import time
from typing import Any, Dict, Optional

# How much of a slower job's time per block the pace takes on.
_SLOWER_WEIGHT = 0.1
# A thread that reads its own completions polls the job socket without sleeping from
# SPIN_EARLY_S before its first job is due (poll() sleeps whole milliseconds, so up to 1 ms
# earlier) until the completion came, or CompletionTracker.spin_s (SPIN_S unless set) after
# it was due.
SPIN_EARLY_S = 0.0001
SPIN_S = 0.001


class JobPace:
    """Seconds per block of recent jobs, by kind (pb.JobCompletion.KIND_*)."""

    def __init__(self) -> None:
        self._per_block: Dict[int, float] = {}

    def learn(self, kind: int, num_blocks: int, seconds: float) -> None:
        """A job of `num_blocks` blocks completed `seconds` after its frame was sent."""
        if num_blocks <= 0 or seconds <= 0:
            return
        per_block = seconds / num_blocks
        known = self._per_block.get(kind)
        if known is None or per_block < known:
            self._per_block[kind] = per_block
        else:
            self._per_block[kind] = known + _SLOWER_WEIGHT * (per_block - known)

    def due(self, kind: int, num_blocks: int) -> Optional[float]:
        """Seconds after sending when a job's completion comes at the earliest at this pace;
        None before any job of its kind completed."""
        per_block = self._per_block.get(kind)
        return None if per_block is None else per_block * num_blocks


def read_turn(turn: Any, limit: float, spin_at: Optional[float],
              spin_end: Optional[float]) -> None:
    """One read of a waiting thread's turn (a job_socket.Reading) of at most `limit` s: it
    sleeps in poll() until spin_at (time.monotonic()) and polls without sleeping from then
    until spin_end (both None: never)."""
    now = time.monotonic()
    if spin_at is not None and spin_end is not None and now < spin_end:
        if spin_at - now < 0.001:  # poll() would sleep past spin_at.
            turn.spin_for(min(limit, spin_end - now))
            return
        limit = min(limit, math.floor((spin_at - now) * 1000) / 1000)
    turn.read_for(limit)
