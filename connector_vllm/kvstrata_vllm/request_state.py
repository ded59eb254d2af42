"""RequestState: what the scheduler side keeps of a request, from its first lookup to its
end (scheduler.py); its load plan and timing are load_planning.py's."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Set, Tuple

from kvstrata.planning import GiveUp


@dataclass
class RequestState:
    request: Any
    plan: Optional[Tuple[int, int, int]] = None   # (local computed tokens, first unit, end unit)
    # Leases its lookups took: ((KV cache group, rank) of the namespace, lease id).
    leases: List[Tuple[Tuple[int, int], int]] = field(default_factory=list)
    loading: bool = False
    stored_units: Optional[int] = None            # leading units handed to the workers to store
    had_stores: bool = False
    store_cap: Optional[int] = None               # tokens; None = no cap
    present_units: int = 0                        # leading units KVStrata held at the lookup
    promoted_to: int = 0                          # units up to which a load's lookup promotes
    tiers: List[int] = field(default_factory=list)  # kvstrata.pb.Tier of each present unit
    local_tokens: int = 0                         # vLLM's local hit at the lookup
    # Its blocks per KV cache group, from SchedulerOutput (0: vLLM's null block).
    block_ids: List[List[int]] = field(default_factory=list)
    load_blocks: Set[int] = field(default_factory=set)  # blocks of the load in flight
    load_failed: bool = False                     # a load of it failed: no second attempt
    sync: bool = False                            # its load runs in the step that uses it
    # The last lookup: ((computed tokens, tokens) asked for, when, its hit in units).
    answer: Optional[Tuple[Tuple[int, int], float, int]] = None
    # Its load in flight: (slowest tier, bytes over every namespace, started, predicted ms,
    # the number of the step that runs it when it loads in that step, else 0, the bytes this
    # engine was already loading from that tier when it started).
    load_info: Optional[Tuple[int, int, float, float, int, int]] = None
    # Tokens it will not prefill: vLLM's local hit plus the hit its last lookup offered
    # (the compute queue, load_planning.backlog_ms).
    ready_tokens: int = 0
    plan_pred: float = 0.0                        # the planner's predicted load ms
    # The last lookup's unit keys from unit 0, until its blocks are allocated (one pass of
    # vLLM's block hashes per hit: ~1 ms for 32K tokens on a slow CPU).
    keys: Optional[List[bytes]] = None
    # The planned load's deadlines (an asynchronous load with units below L1), and the
    # units [first, end) its transfer covers.
    give_up: Optional[GiveUp] = None
    load_span: Tuple[int, int] = (0, 0)
    gave_up: bool = False                         # its load gave up (counted once)

    def hit_sources(self, unit_tokens: int, num_external_tokens: int) -> Dict[str, int]:
        """The external hit's tokens by tier: "host" (L1, DRAM) or "disk" (L2/L3)."""
        out: Dict[str, int] = {}
        left = num_external_tokens
        pos = self.local_tokens
        for u, tier in enumerate(self.tiers):
            end = (u + 1) * unit_tokens
            if end <= pos or left <= 0:
                continue
            n = min(end - pos, left)
            name = "host" if tier <= 1 else "disk"
            out[name] = out.get(name, 0) + n
            left -= n
            pos += n
        if left > 0:
            out["host"] = out.get("host", 0) + left
        return out
