"""Tier: where the daemon holds a block, as LookupResult.tiers reports it (kvstrata.pb.Tier
values, so comparisons with those integers still hold).

The daemon's tiers are data (a [[tiers]] list, docs/configuration.md): wire values 1-3 are the
Tier enum's L1, L2, L3 (as before); a tier beyond those (wire 4, 5, ...) comes through as a
DaemonTier, an int carrying the label and kind the daemon's ListTiers gives it. TierTable is
that table (Session.tier_table()), with the daemon's label of every tier, L1-L3 included.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Union


class Tier(enum.IntEnum):
    UNSPECIFIED = 0
    L1 = 1   # the pinned shared-memory pool (DRAM)
    L2 = 2   # the node's local NVMe directory
    L3 = 3   # the shared filesystem

    @classmethod
    def of(cls, value: int) -> Union["Tier", int]:
        """The Tier of a wire value; a value this client does not know stays an int."""
        return _BY_VALUE.get(value, int(value))

    @classmethod
    def of_all(cls, values: Iterable[int]) -> List[Union["Tier", int]]:
        """Tier.of of each value, by dict lookups at C speed (a 1,000-key lookup's tiers in
        ~15 us, where calling the enum per value took ~600 us)."""
        values = list(values)
        try:
            return list(map(_BY_VALUE.__getitem__, values))
        except KeyError:  # a tier this client does not know: stays an int
            get = _BY_VALUE.get
            return [get(v, v) for v in values]

    def __str__(self) -> str:
        return self.name


_BY_VALUE: Dict[int, Tier] = {int(t): t for t in Tier}


class DaemonTier(int):
    """A tier of the daemon's table that the Tier enum does not name: its wire value (an int,
    so comparisons with integers hold) with the daemon's label ("s3", "hdd", ...) and kind
    ("local-file", "shared-file", "object", ...). str() is the label."""

    label: str
    kind: str
    shared: bool

    def __new__(cls, value: int, label: str, kind: str = "", shared: bool = False) -> "DaemonTier":
        tier = super().__new__(cls, value)
        tier.label, tier.kind, tier.shared = label, kind, shared
        return tier

    @property
    def name(self) -> str:
        return self.label

    def __str__(self) -> str:
        return self.label

    def __repr__(self) -> str:
        return f"DaemonTier({int(self)}, {self.label!r}, {self.kind!r})"


@dataclass(frozen=True)
class TierEntry:
    """One row of the daemon's tier table: `tier` as lookups report it (a Tier for wire 1-3,
    a DaemonTier beyond), the daemon's label and kind, and whether other nodes share it."""

    tier: Union[Tier, DaemonTier]
    label: str
    kind: str
    shared: bool


class TierTable:
    """The daemon's tiers by wire value, from its ListTiers answer (TierInfo: tier, name,
    kind, shared)."""

    def __init__(self, infos: Iterable = ()) -> None:
        self.entries: Dict[int, TierEntry] = {}
        for info in infos:
            value = int(info.tier)
            tier = _BY_VALUE.get(value) or DaemonTier(value, info.name, info.kind, info.shared)
            self.entries[value] = TierEntry(tier, info.name, info.kind, info.shared)

    def __contains__(self, value: int) -> bool:
        return int(value) in self.entries

    def __iter__(self):
        return iter(self.entries.values())

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, value: int) -> Optional[TierEntry]:
        return self.entries.get(int(value))

    def by_label(self, label: str) -> Optional[TierEntry]:
        return next((e for e in self.entries.values() if e.label == label), None)

    def of_all(self, values: Iterable[int]) -> List[Union[Tier, DaemonTier, int]]:
        """Tier.of_all, with the values beyond the enum as this table's DaemonTiers (a value
        the table lacks too stays an int)."""
        out = Tier.of_all(values)
        for i, t in enumerate(out):
            if not isinstance(t, Tier):
                entry = self.entries.get(int(t))
                out[i] = entry.tier if entry is not None else t
        return out
