"""The node benchmark's load generator: conversations through the router, N requests in
flight.

Conversations wait in one queue, in order. A free worker (there are `concurrency`) takes the
conversation at its head, sends its next turn to the replica the router picks, appends the
answer and puts the conversation back at the tail while it has turns left. So a
conversation's next turn comes after every other waiting conversation's: between two turns
of one conversation the node serves many others, which is what pushes its KV out of HBM.

Hooks for faults.py (all off by default): `max_turn` stops every conversation after that
turn (a later call sends the rest), `t0` puts the record offsets on another clock origin
(perf_counter), and a `Live` shows the requests in flight per replica to a fault task
running in the same event loop, whose `limit` parks workers (fewer requests in flight once
a replica is dead: the others keep their load); `retry_dead` sends a turn that failed on a
replica the router now calls dead again to a live one (the failure stays in the records).
"""
from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import aiohttp

from client import Completion, complete
from router import Router
from workload import Conversation


@dataclass
class Live:
    """What a fault task sees and steers while the load runs: the requests in flight per
    replica (conversation id -> turn), the requests finished per turn (answered or
    failed), the clock origin, and a limit on the workers that may send (None: all)."""
    t0: float = 0.0
    in_flight: Dict[int, Dict[str, int]] = field(default_factory=dict)
    finished: Dict[int, int] = field(default_factory=dict)
    limit: Optional[int] = None

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0


async def run_conversations(urls: List[str], model: str, router: Router,
                            conversations: List[Conversation], concurrency: int,
                            max_tokens: int, request_timeout_s: float,
                            max_turn: Optional[int] = None, t0: Optional[float] = None,
                            live: Optional[Live] = None,
                            retry_dead: bool = False) -> Dict[str, Any]:
    """Every turn of every conversation (up to max_turn); wall time and one record per
    request (conversation id, turn, start and end offsets from the first send or from t0,
    the Completion). A failed turn ends its conversation (its later prompts would need the
    answer), unless retry_dead and the router has marked its replica dead since."""
    queue = deque(conversations)
    records: List[Dict[str, Any]] = []
    wake = asyncio.Event()
    active = 0  # conversations taken by a worker right now
    t0 = time.perf_counter() if t0 is None else t0
    live = live if live is not None else Live()
    live.t0 = t0

    async def worker(k: int, session: aiohttp.ClientSession) -> None:
        nonlocal active
        while True:
            if not queue and active == 0:
                return  # nothing waiting and nothing that could come back
            if live.limit is not None and k >= live.limit:  # parked by a fault task
                await asyncio.sleep(0.05)
                continue
            if not queue:
                wake.clear()
                await wake.wait()
                continue
            conv = queue.popleft()
            active += 1
            turn = conv.next_turn
            replica = router.acquire(conv.conv_id)
            start = time.perf_counter() - t0
            live.in_flight.setdefault(replica, {})[conv.conv_id] = turn
            try:
                res: Completion = await complete(session, urls[replica], model, conv.prompt(),
                                                 max_tokens, replica, request_timeout_s)
            finally:
                router.release(replica)
                live.in_flight[replica].pop(conv.conv_id, None)
                live.finished[turn] = live.finished.get(turn, 0) + 1
            records.append({"conv": conv.conv_id, "turn": turn,
                            "start_s": round(start, 6),
                            "end_s": round(time.perf_counter() - t0, 6), **res.to_json()})
            if res.error is None:
                conv.add_answer(res.token_ids)
                if not conv.done and (max_turn is None or conv.next_turn <= max_turn):
                    queue.append(conv)
            elif retry_dead and replica in router.dead and router.live():
                queue.append(conv)  # the same turn again, on a live replica
            active -= 1
            wake.set()

    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.gather(*(worker(k, session) for k in range(concurrency)))
    wall = time.perf_counter() - t0
    records.sort(key=lambda r: (r["conv"], r["turn"]))
    return {"wall_s": round(wall, 4), "requests": records,
            "sent_per_replica": list(router.sent)}
