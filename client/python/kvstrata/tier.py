"""Tier: where the daemon holds a block, as LookupResult.tiers reports it (kvstrata.pb.Tier
values, so comparisons with those integers still hold)."""
from __future__ import annotations

import enum
from typing import Union


class Tier(enum.IntEnum):
    UNSPECIFIED = 0
    L1 = 1   # the pinned shared-memory pool (DRAM)
    L2 = 2   # the node's local NVMe directory
    L3 = 3   # the shared filesystem

    @classmethod
    def of(cls, value: int) -> Union["Tier", int]:
        """The Tier of a wire value; a value this client does not know stays an int."""
        try:
            return cls(value)
        except ValueError:
            return int(value)

    def __str__(self) -> str:
        return self.name
