"""Lookups and leases of a kvstrata.Session.

A lookup answers how many leading keys of a chain the daemon holds, in which tier each, and
with lease=True pins them under a lease until a load consumes it (the load may be another
session's of the same tenant, e.g. an engine's worker loading what its scheduler looked up),
it is released, or it expires. A leased lookup also starts promoting the hits below L1
(L2/L3) into L1, where they join the lease as they land -- unless promote=False: then they
are answered only (not read, not in the lease), for a caller that decides first whether
to load them (a load promotes what it needs itself). Calls go over the daemon's fast-path
socket when it can answer them (one frame per call; `fast` in the answer), else over gRPC.

The part of kvstrata.Session given its kvstrata.connection.Connection (the session id,
gRPC calls, the fast-path socket); it keeps only which frames the daemon refused.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, List, Optional, Sequence, Union

import grpc

from .connection import Connection
from .errors import KVStrataError
from .fast_path import MAX_LOOKUP_NAMESPACES, MAX_RELEASE_LEASES, NotSpoken
from .host import LookupResult, key_bytes
from .spec import NamespaceArg, namespace_id
from .tier import Tier, TierTable


@dataclass(frozen=True)
class NamespacesLookup:
    """lookup_namespaces: the leading keys every namespace holds, per hit the slowest tier
    any holds it in, one lease id per namespace asked (0: none)."""

    hit_blocks: int
    tiers: List[int] = field(default_factory=list)       # Tier members
    lease_ids: List[int] = field(default_factory=list)   # one per namespace, in order
    lease_expires_unix_ms: int = 0
    round_trips: int = 1                                 # daemon calls it took
    fast: bool = False


class Lookups:
    """lookup, lookup_namespaces, release_lease, release_leases of a kvstrata.Session."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._table: Optional[TierTable] = None  # the daemon's, once a lookup needed it
        self._namespaces_frames = True  # False once the daemon refused a version-2 lookup frame
        self._release_frames = True     # False once the daemon refused a release frame

    def lookup(self, ns: NamespaceArg, keys: Sequence[bytes], lease: bool = False,
               lease_ttl_ms: int = 0, promote: bool = True) -> LookupResult:
        """How many leading keys of the chain are present, and where; lease=True pins them
        (until loaded, released or expired) and answers the lease id (0 when no hit).
        Over the daemon's lookup fast path when it can answer (`.fast`), else gRPC."""
        keys = key_bytes(keys)
        fast = self._conn.lookup_socket(keys)
        if fast is not None:
            sid = self._conn.sid()
            try:
                hits, tiers, lease_id, expires = fast.lookup(sid, namespace_id(ns), keys,
                                                             lease, lease_ttl_ms, promote)
                return LookupResult(hits, self._tiers(tiers), lease_id, expires, fast=True)
            except NotSpoken:
                self._conn.fast_path = False  # Then through gRPC below.
            except KVStrataError as err:
                raise self._conn.failed(err, sid) from None
        r = self._conn.call("lookup", namespace_id=namespace_id(ns), keys=keys,
                            acquire_lease=lease, lease_ttl_ms=lease_ttl_ms,
                            skip_promotion=lease and not promote)
        return LookupResult(r.hit_blocks, self._tiers(loc.tier for loc in r.locations),
                            r.lease_id, r.lease_expires_unix_ms)

    def lookup_namespaces(self, namespaces: Sequence[NamespaceArg], keys: Sequence[bytes],
                          lease: bool = False, lease_ttl_ms: int = 0,
                          promote: bool = True) -> NamespacesLookup:
        """One chain in several namespaces (e.g. every tensor-parallel rank's): the leading
        keys every one holds. The namespaces are asked in order, each for the keys all the
        ones before it hold (none: the rest are not asked); with lease=True each namespace
        that holds some of the keys it was asked for pins them under a lease of its own.
        One round trip over the fast path (up to 64 namespaces a frame), else one lookup
        per namespace."""
        keys = key_bytes(keys)
        ids = [namespace_id(ns) for ns in namespaces]
        fast = self._conn.lookup_socket(keys) if self._namespaces_frames else None
        if fast is not None and 0 < len(ids) <= MAX_LOOKUP_NAMESPACES:
            sid = self._conn.sid()
            try:
                hits, tiers, leases, expires = fast.lookup_namespaces(sid, ids, keys, lease,
                                                                      lease_ttl_ms, promote)
                return NamespacesLookup(hits, self._tiers(tiers), leases, expires, fast=True)
            except NotSpoken:
                self._conn.fast_path = False
            except KVStrataError as err:
                if err.code != grpc.StatusCode.INVALID_ARGUMENT:
                    raise self._conn.failed(err, sid) from None
                self._namespaces_frames = False  # a daemon without version-2 frames
        return self._lookup_each(ids, keys, lease, lease_ttl_ms, promote)

    def _lookup_each(self, ids: List[int], keys: List[bytes], lease: bool,
                     lease_ttl_ms: int, promote: bool) -> NamespacesLookup:
        hit, tiers, leases, expires, calls, fast = len(keys), [], [0] * len(ids), 0, 0, True
        for i, ns in enumerate(ids):
            if hit == 0:
                break
            try:
                r = self.lookup(ns, keys[:hit], lease, lease_ttl_ms, promote)
            except KVStrataError:
                self.release_leases([x for x in leases if x])
                raise
            calls += 1
            fast = fast and r.fast
            leases[i], expires = r.lease_id, r.lease_expires_unix_ms or expires
            hit = min(hit, r.hit_blocks)
            tiers = list(r.tiers[:hit]) if i == 0 else \
                [max(a, b) for a, b in zip(tiers[:hit], r.tiers)]
        if not ids:
            hit = 0
        return NamespacesLookup(hit, tiers[:hit], leases, expires, calls, fast and calls > 0)

    def tier_table(self, refresh: bool = False) -> TierTable:
        """The daemon's tiers (ListTiers), asked once and kept (refresh=True asks again)."""
        if self._table is None or refresh:
            self._table = TierTable(self._conn.client.list_tiers().tiers)
        return self._table

    def _tiers(self, values: Iterable[int]) -> List[Union[Tier, int]]:
        """Tier.of_all; values beyond the enum (a [[tiers]] list's fourth tier on) as the
        daemon's DaemonTiers, labelled: its table is asked on the first such value, and again
        when a value is not in it (a daemon restarted with another list). Where the daemon
        does not answer ListTiers they stay ints."""
        out = Tier.of_all(values)
        unknown = [t for t in out if not isinstance(t, Tier)]
        if not unknown:
            return out
        try:
            table = self.tier_table()
            if any(t not in table for t in unknown):
                table = self.tier_table(refresh=True)
        except KVStrataError:
            return out
        return table.of_all(out)

    def release_lease(self, lease_id: int) -> None:
        """End a lease from lookup(lease=True) without loading."""
        self._conn.call("release_lease", lease_id=lease_id)

    def release_leases(self, lease_ids: Sequence[int]) -> int:
        """End several leases of this session without loading: one release frame over the
        fast path, else one ReleaseLease each. A lease that has already ended (consumed,
        expired, released) is skipped; answers how many ended now."""
        ids = [int(x) for x in lease_ids if x]
        if not ids:
            return 0
        fast = self._conn.lookup_socket([b"k"]) if self._release_frames else None
        if fast is not None:
            sid = self._conn.sid()
            try:
                return sum(fast.release(sid, ids[i:i + MAX_RELEASE_LEASES])
                           for i in range(0, len(ids), MAX_RELEASE_LEASES))
            except NotSpoken:
                self._conn.fast_path = False
            except KVStrataError as err:
                if err.code != grpc.StatusCode.INVALID_ARGUMENT:
                    raise self._conn.failed(err, sid) from None
                self._release_frames = False  # a daemon without release frames
        released = 0
        for lease_id in ids:
            try:
                self.release_lease(lease_id)
                released += 1
            except KVStrataError as err:
                if err.code not in (grpc.StatusCode.NOT_FOUND,
                                    grpc.StatusCode.FAILED_PRECONDITION):
                    raise
        return released
