// PartitionedCache: the L1 tier as the daemon's callers see it — one BlockCache per
// partition of the shared region (partition 0 for the tenants without an L1 share of their
// own, one more per tenant with one: docs/security.md), behind BlockCache's calls.
//
// Routing: a call naming a namespace goes to the namespace's partition (AssignPartition;
// partition 0 until assigned). Reservation, load and lease ids carry their partition in
// the top 16 bits (each BlockCache counts from PartitionFirstId), so a call naming an id
// goes to the partition that issued it; an id of no partition is unknown (NOT_FOUND).
// Session-wide calls (EndSession, ReapExpired, ReleaseFenced) and Clear/VisibleKeys of
// every namespace visit every partition. Offsets are offsets in the whole region (each
// partition's allocator starts at its base), so the tiers and the GPU path see one
// address space; a host-mode client that maps one partition subtracts its base.
//
// With one partition every call is BlockCache's, unchanged. Thread-safe; errors and
// blocking as BlockCache's. The caches are not owned and outlive this object.
#ifndef KVSTRATA_DAEMON_CACHE_PARTITIONED_CACHE_H_
#define KVSTRATA_DAEMON_CACHE_PARTITIONED_CACHE_H_

#include <atomic>
#include <memory>
#include <optional>
#include <vector>

#include "daemon/cache/block_cache.h"

namespace kvstrata {

class PartitionedCache {
 public:
  using Keys = BlockCache::Keys;

  struct Partition {
    BlockCache* cache = nullptr;
    uint64_t base_offset = 0;  // where its slots start in the region
    uint64_t bytes = 0;
  };
  // Ids issued by partition p start here (BlockCacheOptions::first_id).
  static uint64_t PartitionFirstId(size_t p) { return (static_cast<uint64_t>(p) << 48) + 1; }
  static constexpr size_t kMaxPartitions = 256;
  static constexpr size_t kMaxNamespaces = 1 << 17;  // ids above stay in partition 0

  // REQUIRES: 1..kMaxPartitions partitions, each cache created with PartitionFirstId(p).
  explicit PartitionedCache(std::vector<Partition> partitions);

  size_t partition_count() const { return partitions_.size(); }
  const Partition& partition(size_t p) const { return partitions_[p]; }
  // Blocks of `ns` live in partition `p` from now on. Call before `ns` is used (at
  // registration); REQUIRES: p < partition_count().
  void AssignPartition(NamespaceId ns, size_t p);
  size_t PartitionOf(NamespaceId ns) const;

  absl::StatusOr<LookupResult> Lookup(SessionId session, NamespaceId ns, Keys keys,
                                      std::optional<absl::Duration> lease_ttl,
                                      bool past_miss = false) {
    return At(ns).Lookup(session, ns, keys, lease_ttl, past_miss);
  }
  absl::StatusOr<ReserveResult> ReserveStore(SessionId session, NamespaceId ns,
                                             uint64_t block_bytes, Keys keys,
                                             bool bypass_admission = false,
                                             absl::Span<const uint32_t> slot_order = {}) {
    return At(ns).ReserveStore(session, ns, block_bytes, keys, bypass_admission, slot_order);
  }
  absl::StatusOr<size_t> CommitStore(SessionId session, ReservationId reservation,
                                     std::optional<absl::Span<const uint32_t>> written,
                                     std::optional<LeaseRef> into = std::nullopt);
  absl::Status AbortStore(SessionId session, ReservationId reservation);
  // 0 when the lease belongs to another partition than `ns` (it cannot hold its blocks).
  size_t AddToLease(LeaseRef into, NamespaceId ns, Keys keys);
  // An empty lease in the partition of `ns` (blocks of `ns` join it).
  absl::StatusOr<LeaseId> CreateEmptyLease(SessionId session, NamespaceId ns, absl::Duration ttl) {
    return At(ns).CreateEmptyLease(session, ttl);
  }
  std::vector<BlockKey> VisibleKeys(std::optional<NamespaceId> ns) const;
  // A lease of another partition than `ns` is unknown (NOT_FOUND).
  absl::StatusOr<LoadResult> AcquireLoad(SessionId session, NamespaceId ns, Keys keys,
                                         std::optional<LeaseId> lease);
  absl::Status ReleaseLoad(SessionId session, LoadId load);
  absl::StatusOr<std::vector<std::optional<Tier>>> Peek(NamespaceId ns, Keys keys) const {
    return At(ns).Peek(ns, keys);
  }
  absl::Status ReleaseLease(SessionId session, LeaseId lease);
  // BlockCache::LeaseOwner / TransferLease in the partition that issued `lease`.
  absl::StatusOr<SessionId> LeaseOwner(LeaseId lease) const;
  absl::Status TransferLease(LeaseId lease, SessionId from, SessionId to);

  SessionEndResult EndSession(SessionId session);
  ReapResult ReapExpired();
  size_t ReleaseFenced(SessionId session);

  absl::StatusOr<size_t> Evict(NamespaceId ns, Keys keys, std::vector<bool>* evicted = nullptr) {
    return At(ns).Evict(ns, keys, evicted);
  }
  size_t Clear(std::optional<NamespaceId> ns);
  absl::StatusOr<size_t> Pin(NamespaceId ns, Keys keys) { return At(ns).Pin(ns, keys); }
  absl::StatusOr<size_t> Unpin(NamespaceId ns, Keys keys) { return At(ns).Unpin(ns, keys); }
  absl::StatusOr<std::vector<bool>> Pinned(NamespaceId ns, Keys keys) const {
    return At(ns).Pinned(ns, keys);
  }

  // Every partition's statistics added up, or one partition's.
  CacheStats Stats() const;
  CacheStats PartitionStats(size_t p) const { return partitions_[p].cache->Stats(); }

 private:
  BlockCache& At(NamespaceId ns) const { return *partitions_[PartitionOf(ns)].cache; }
  // The partition that issued `id`, or nullptr.
  BlockCache* ForId(uint64_t id) const;

  const std::vector<Partition> partitions_;
  std::unique_ptr<std::atomic<uint8_t>[]> ns_partition_;  // [kMaxNamespaces], 0 = partition 0
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_CACHE_PARTITIONED_CACHE_H_
