"""KvEventFeed: the vLLM KV events the connector's scheduler side publishes (take_events).

BlockStored (medium "CPU", one per unit, with its tokens, parent and LoRA) once every
storing rank reported the unit stored; then, from the daemon's own KV events (PollEvents on
rank 0's namespace of KV cache group 0; needs events.enabled on kvstratad), BlockRemoved
when a unit leaves L1, and a token-less BlockStored / BlockRemoved with medium "STORAGE" as
it is first written to L2/L3 and as it leaves the last of them -- exactly one removal per
(unit, medium). Not thread-safe: the scheduler's thread calls everything.
"""
from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Any, Callable, Dict, List, Optional, Tuple

import grpc

import kvstrata
from kvstrata import pb

log = logging.getLogger("kvstrata_vllm")
_MAX_ANNOUNCED = 1 << 20  # units remembered for their BlockRemoved
_MEDIA = ("CPU", "STORAGE")  # vLLM's MEDIUM_CPU, MEDIUM_STORAGE: the daemon's L1; L2 and L3
MAX_EVENT_INFO = 65536  # Stored units whose KV event waits for the workers' report.
# A stored unit's BlockStored facts: its tokens, its parent's key, (lora_id, lora_name).
_EventInfo = Tuple[List[int], Optional[bytes], Optional[Tuple[int, str]]]


class KvEventFeed:
    def __init__(self, kv_cache_config: Any, unit_tokens: int, storing_ranks: int) -> None:
        self.unit_tokens = unit_tokens
        self.storing_ranks = storing_ranks   # workers whose stores of a unit make its event
        self.spec_kind = _spec_kind(kv_cache_config)
        self._event_info: "OrderedDict[bytes, _EventInfo]" = OrderedDict()
        self._events: List[Any] = []
        # Units announced with BlockStored, by the 64-bit hash the daemon's events carry
        # (the key's last 8 bytes, big-endian), and how many of the daemon's tiers hold each
        # (hash, medium) now: L2 and L3 are both "STORAGE", announced while either holds it.
        self._announced: "OrderedDict[int, bytes]" = OrderedDict()
        self._live: Dict[Tuple[int, str], int] = {}
        self._removals_off = False  # the daemon publishes no events: said once

    def planned(self, key: bytes, tokens: List[int], parent: Optional[bytes],
                lora: Any) -> None:
        """A unit handed to the workers to store: its BlockStored waits for their reports."""
        self._event_info[key] = (list(tokens), parent,
                                 (int(lora.lora_int_id), str(lora.lora_name)) if lora else None)
        while len(self._event_info) > MAX_EVENT_INFO:
            self._event_info.popitem(last=False)

    def stored(self, counts: Dict[bytes, int]) -> None:
        """The workers' stores this step (KVStrataWorkerMetadata.stored: ranks per key)."""
        for key, n in counts.items():
            info = self._event_info.get(key)
            if info is not None and n >= self.storing_ranks:
                del self._event_info[key]
                self._events.append(_block_stored(key, info, self.unit_tokens, self.spec_kind))
                self._announce(key)

    def take(self, poll: Callable[[], Optional[List[Any]]]) -> List[Any]:
        """The events since the last take; `poll` returns the daemon's new event batches
        (None without a session), raising kvstrata.KVStrataError."""
        self._events.extend(self._daemon_events(poll))
        events, self._events = self._events, []
        return events

    def _announce(self, key: bytes) -> None:
        h = int.from_bytes(key[-8:], "big")
        self._announced[h] = key
        self._announced.move_to_end(h)
        self._live[(h, "CPU")] = 1
        while len(self._announced) > _MAX_ANNOUNCED:
            old, _ = self._announced.popitem(last=False)
            for m in _MEDIA:
                self._live.pop((old, m), None)

    def _daemon_events(self, poll: Callable[[], Optional[List[Any]]]) -> List[Any]:
        """The daemon's own KV events for the units this connector announced (PollEvents on
        rank 0's namespace; needs events.enabled on kvstratad): BlockRemoved when a unit
        leaves L1, and BlockStored / BlockRemoved (medium STORAGE, token-less: a tier update
        for a key the router indexed) as it is first written to L2/L3 and as it leaves the
        last of them -- one removal per store and medium. Every rank's unit has the same key,
        so rank 0 speaks for all (and KV cache group 0 for a hybrid model's groups)."""
        if not self._announced or self._removals_off:
            return []
        try:
            batches = poll()
        except kvstrata.KVStrataError as err:
            if err.code == grpc.StatusCode.FAILED_PRECONDITION:
                self._removals_off = True
                log.warning("kvstrata_vllm: kvstratad publishes no KV events (%s): take_events "
                            "reports stores only", err)
            # Any other error (daemon down, ...) is a lookup's or a store's to report: the
            # next step asks again from the same cursor.
            return []
        if batches is None:
            return []
        out: List[Any] = []
        for batch in batches:
            for ev in batch.events:
                if ev.kind == pb.KvEvent.KIND_ALL_BLOCKS_CLEARED:
                    for h, medium in sorted(self._live):
                        out.append(_block_removed(self._announced[h], medium))
                    self._live.clear()
                    continue
                for h in ev.block_hashes:
                    key, live = self._announced.get(h), (h, ev.medium)
                    if key is None:
                        continue  # not a unit of this connector's
                    held = self._live.get(live, 0)
                    if ev.kind == pb.KvEvent.KIND_BLOCK_REMOVED and held > 0:
                        if held > 1:
                            self._live[live] = held - 1
                            continue
                        del self._live[live]
                        out.append(_block_removed(key, ev.medium))
                    elif ev.kind == pb.KvEvent.KIND_BLOCK_STORED and ev.medium != "CPU":
                        self._live[live] = held + 1
                        if held == 0:
                            out.append(_block_written_down(key, ev.medium, self.unit_tokens,
                                                           self.spec_kind))
        return out


# The KV events speak for KV cache group 0 (a hybrid model's other groups store the same
# units): group_idx 0, as vLLM's own BlockStored / BlockRemoved for that group carry.
EVENT_GROUP = 0


def _spec_kind(kv_cache_config: Any) -> Optional[str]:
    """vLLM's kv_cache_spec_kind of the (single) group, e.g. "full_attention"; None where
    this vLLM lacks get_kv_cache_spec_kind."""
    try:
        from vllm.v1.kv_cache_interface import get_kv_cache_spec_kind  # noqa: PLC0415

        return str(get_kv_cache_spec_kind(kv_cache_config.kv_cache_groups[0].kv_cache_spec).value)
    except (ImportError, AttributeError, IndexError):
        return None


def _block_removed(key: bytes, medium: str) -> Any:
    from vllm.distributed.kv_events import BlockRemoved  # noqa: PLC0415

    return BlockRemoved(block_hashes=[key], medium=medium, group_idx=EVENT_GROUP)


def _block_written_down(key: bytes, medium: str, unit: int, kind: Optional[str]) -> Any:
    """A unit the daemon wrote to L2 or L3 ("STORAGE"): no tokens, which llm-d reads as a
    tier update for a key it indexed from the unit's CPU BlockStored."""
    from vllm.distributed.kv_events import BlockStored  # noqa: PLC0415

    return BlockStored(block_hashes=[key], parent_block_hash=None, token_ids=[], block_size=unit,
                       lora_id=None, medium=medium, lora_name=None, group_idx=EVENT_GROUP,
                       kv_cache_spec_kind=kind)


def _block_stored(key: bytes, info: _EventInfo, unit: int,
                  kind: Optional[str]) -> Any:
    from vllm.distributed.kv_events import MEDIUM_CPU, BlockStored  # noqa: PLC0415

    tokens, parent, lora = info
    return BlockStored(block_hashes=[key], parent_block_hash=parent, token_ids=tokens,
                       block_size=unit, lora_id=lora[0] if lora else None, medium=MEDIUM_CPU,
                       lora_name=lora[1] if lora else None, group_idx=EVENT_GROUP,
                       kv_cache_spec_kind=kind)
