"""What the scheduler-side connector sends its workers each step, and what they send back.

Block ids are vLLM's, of one KV cache group (RequestTransfer.group). A unit is
`blocks_per_unit` consecutive blocks of a request; its `block_ids` list has one entry per
block, -1 for a block the worker must not write (it already holds valid KV from vLLM's local
prefix cache, or is a sliding-window group's null block outside the window).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set, Tuple

from kvstrata.planning import GiveUp

try:
    from vllm.distributed.kv_transfer.kv_connector.v1.base import (KVConnectorMetadata,
                                                                   KVConnectorWorkerMetadata)
except ImportError:  # pragma: no cover - the package imports without vLLM (docs, linters)
    KVConnectorMetadata = object  # type: ignore[assignment,misc]
    KVConnectorWorkerMetadata = object  # type: ignore[assignment,misc]


@dataclass
class UnitTransfer:
    key: bytes
    block_ids: List[int]


def load_units(block_ids: List[int], keys: List[bytes], u0: int, u1: int, first_block: int,
               end_block: int, blocks_per_unit: int) -> List[UnitTransfer]:
    """The units [u0, u1) (keys[i] is unit u0 + i) of a load into one KV cache group's
    `block_ids`, writing only its blocks [first_block, end_block) that are not vLLM's null
    block (0): a block outside that range or null is -1 (vLLM's local hit; a sliding-window
    group's blocks before its window), and a unit with no block to write is left out. A
    sliding-window group's leading null blocks are skipped at once (an 8K-token hit of a
    128-token window writes 8 blocks: the scheduler builds this in the engine's step)."""
    lo = first_block
    while lo < end_block and block_ids[lo] <= 0:
        lo += 1
    if blocks_per_unit == 1:
        return [UnitTransfer(keys[b - u0], [block_ids[b]])
                for b in range(max(u0, lo), min(u1, end_block)) if block_ids[b] > 0]
    units = []
    for u in range(max(u0, lo // blocks_per_unit), u1):
        ids = [block_ids[b] if lo <= b < end_block and block_ids[b] > 0 else -1
               for b in range(u * blocks_per_unit, (u + 1) * blocks_per_unit)]
        if any(b >= 0 for b in ids):
            units.append(UnitTransfer(keys[u - u0], ids))
    return units


@dataclass
class RequestTransfer:
    req_id: str
    units: List[UnitTransfer]
    # Loads: scheduled in this very step (load_async=False), so the blocks must be there
    # before the forward pass reads them: on GPUs layer by layer (wait_for_layer_load).
    sync: bool = False
    group: int = 0  # the KV cache group (namespace.KvGroup.index) of the block ids
    # Loads: the lease the scheduler's lookup took on each rank's namespace of the group
    # (rank -> lease id; the rank in the engine, stages.Ranks): that rank's load consumes it
    # (the first attempt only).
    leases: Dict[int, int] = field(default_factory=dict)
    # Asynchronous loads with units below L1 (the load planner on): when the load stops
    # waiting for them (kvstrata.planning.GiveUp, ms from the worker's start of the load);
    # the worker then loads the units as they reach L1 (staged_loads.py).
    give_up: Optional[GiveUp] = None


@dataclass
class KVStrataMetadata(KVConnectorMetadata):  # type: ignore[misc]
    loads: List[RequestTransfer] = field(default_factory=list)
    # Written by this step's forward pass: stored by wait_for_save, after it.
    stores: List[RequestTransfer] = field(default_factory=list)
    # request_finished answered True for these (their blocks wait for get_finished).
    delayed_frees: Set[str] = field(default_factory=set)
    preempted: Set[str] = field(default_factory=set)
    # Engines with sliding-window groups: the blocks this step hands out. A store still
    # reading one (vLLM frees a sliding-window block once it leaves the window) must end
    # before this step's forward pass writes it.
    new_blocks: Set[int] = field(default_factory=set)
    # Requests that finished (or were aborted) before this step: a retried load of theirs
    # is dropped (their blocks may be handed out again).
    finished: Set[str] = field(default_factory=set)
    # The scheduler's number of this step: the workers send it back with the step's output
    # (KVStrataWorkerMetadata.step), which tells the load planner which step just ended.
    step: int = 0
    # A step without a forward pass while asynchronous loads are in flight (an engine with
    # nothing else to run): how long get_finished may wait for them, so that a load is
    # reported in this step's output rather than an empty step or two later.
    idle_wait_ms: float = 0.0


@dataclass
class KVStrataWorkerMetadata(KVConnectorWorkerMetadata):  # type: ignore[misc]
    """Keys each worker stored this step, counted over the ranks (aggregate adds), the
    load jobs that completed: (the job's request ids, its time in ms as the daemon measured
    it), one entry per job and rank (aggregate concatenates; the planner takes the slowest
    rank's), the number of the step this output ends (KVStrataMetadata.step), and the loads
    that gave up at their deadline: (request id, units landed, units planned, ms waited,
    the deadline in ms), one per rank (staged_loads.py)."""

    stored: Dict[bytes, int] = field(default_factory=dict)
    loads: List[Tuple[Tuple[str, ...], float]] = field(default_factory=list)
    step: int = 0
    gave_up: List[Tuple[str, int, int, float, float]] = field(default_factory=list)

    def aggregate(self, other: "KVStrataWorkerMetadata") -> "KVStrataWorkerMetadata":
        merged = dict(self.stored)
        for key, n in other.stored.items():
            merged[key] = merged.get(key, 0) + n
        return KVStrataWorkerMetadata(merged, self.loads + other.loads,
                                      max(self.step, other.step),
                                      self.gave_up + other.gave_up)
