"""The node benchmark's load generator: conversations through the router, N requests in
flight.

Conversations wait in one queue, in order. A free worker (there are `concurrency`) takes the
conversation at its head, sends its next turn to the replica the router picks, appends the
answer and puts the conversation back at the tail while it has turns left. So a
conversation's next turn comes after every other waiting conversation's: between two turns
of one conversation the node serves many others, which is what pushes its KV out of HBM.
"""
from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Any, Dict, List

import aiohttp

from client import Completion, complete
from router import Router
from workload import Conversation


async def run_conversations(urls: List[str], model: str, router: Router,
                            conversations: List[Conversation], concurrency: int,
                            max_tokens: int, request_timeout_s: float) -> Dict[str, Any]:
    """Every turn of every conversation; wall time and one record per request (conversation
    id, turn, start and end offsets from the first send, the Completion). A failed turn ends
    its conversation (its later prompts would need the answer)."""
    queue = deque(conversations)
    records: List[Dict[str, Any]] = []
    wake = asyncio.Event()
    active = 0  # conversations taken by a worker right now
    t0 = time.perf_counter()

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal active
        while True:
            while not queue:
                if active == 0:
                    return  # nothing waiting and nothing that could come back
                wake.clear()
                await wake.wait()
            conv = queue.popleft()
            active += 1
            turn = conv.next_turn
            replica = router.acquire(conv.conv_id)
            start = time.perf_counter() - t0
            try:
                res: Completion = await complete(session, urls[replica], model, conv.prompt(),
                                                 max_tokens, replica, request_timeout_s)
            finally:
                router.release(replica)
            records.append({"conv": conv.conv_id, "turn": turn,
                            "start_s": round(start, 6),
                            "end_s": round(time.perf_counter() - t0, 6), **res.to_json()})
            if res.error is None:
                conv.add_answer(res.token_ids)
                if not conv.done:
                    queue.append(conv)
            active -= 1
            wake.set()

    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    wall = time.perf_counter() - t0
    records.sort(key=lambda r: (r["conv"], r["turn"]))
    return {"wall_s": round(wall, 4), "requests": records,
            "sent_per_replica": list(router.sent)}
