#include "daemon/cache/partitioned_cache.h"

#include "absl/strings/str_cat.h"

namespace kvstrata {
namespace {

absl::Status UnknownId(const char* what, uint64_t id) {
  return absl::NotFoundError(absl::StrCat(what, " ", id, " is unknown"));
}

}  // namespace

PartitionedCache::PartitionedCache(std::vector<Partition> partitions)
    : partitions_(std::move(partitions)),
      ns_partition_(new std::atomic<uint8_t>[kMaxNamespaces]()) {}

void PartitionedCache::AssignPartition(NamespaceId ns, size_t p) {
  if (ns < kMaxNamespaces && p < partitions_.size()) {
    ns_partition_[ns].store(static_cast<uint8_t>(p), std::memory_order_release);
  }
}

size_t PartitionedCache::PartitionOf(NamespaceId ns) const {
  if (partitions_.size() == 1 || ns >= kMaxNamespaces) return 0;
  return ns_partition_[ns].load(std::memory_order_acquire);
}

BlockCache* PartitionedCache::ForId(uint64_t id) const {
  uint64_t p = id >> 48;
  return p < partitions_.size() ? partitions_[p].cache : nullptr;
}

absl::StatusOr<size_t> PartitionedCache::CommitStore(
    SessionId session, ReservationId reservation, std::optional<absl::Span<const uint32_t>> written,
    std::optional<LeaseRef> into) {
  BlockCache* cache = ForId(reservation);
  if (cache == nullptr) return UnknownId("reservation", reservation);
  if (into.has_value() && ForId(into->lease) != cache) into.reset();  // cannot hold them
  return cache->CommitStore(session, reservation, written, into);
}

absl::Status PartitionedCache::AbortStore(SessionId session, ReservationId reservation) {
  BlockCache* cache = ForId(reservation);
  if (cache == nullptr) return UnknownId("reservation", reservation);
  return cache->AbortStore(session, reservation);
}

size_t PartitionedCache::AddToLease(LeaseRef into, NamespaceId ns, Keys keys) {
  BlockCache& cache = At(ns);
  if (ForId(into.lease) != &cache) return 0;
  return cache.AddToLease(into, ns, keys);
}

std::vector<BlockKey> PartitionedCache::VisibleKeys(std::optional<NamespaceId> ns) const {
  if (ns.has_value()) return At(*ns).VisibleKeys(ns);
  std::vector<BlockKey> all;
  for (const Partition& p : partitions_) {
    std::vector<BlockKey> keys = p.cache->VisibleKeys(std::nullopt);
    all.insert(all.end(), keys.begin(), keys.end());
  }
  return all;
}

absl::StatusOr<LoadResult> PartitionedCache::AcquireLoad(SessionId session, NamespaceId ns,
                                                         Keys keys, std::optional<LeaseId> lease) {
  BlockCache& cache = At(ns);
  if (lease.has_value() && ForId(*lease) != &cache) return UnknownId("lease", *lease);
  return cache.AcquireLoad(session, ns, keys, lease);
}

absl::Status PartitionedCache::ReleaseLoad(SessionId session, LoadId load) {
  BlockCache* cache = ForId(load);
  if (cache == nullptr) return UnknownId("load", load);
  return cache->ReleaseLoad(session, load);
}

absl::Status PartitionedCache::ReleaseLease(SessionId session, LeaseId lease) {
  BlockCache* cache = ForId(lease);
  if (cache == nullptr) return UnknownId("lease", lease);
  return cache->ReleaseLease(session, lease);
}

absl::StatusOr<SessionId> PartitionedCache::LeaseOwner(LeaseId lease) const {
  const BlockCache* cache = ForId(lease);
  if (cache == nullptr) return UnknownId("lease", lease);
  return cache->LeaseOwner(lease);
}

absl::Status PartitionedCache::TransferLease(LeaseId lease, SessionId from, SessionId to) {
  BlockCache* cache = ForId(lease);
  if (cache == nullptr) return UnknownId("lease", lease);
  return cache->TransferLease(lease, from, to);
}

SessionEndResult PartitionedCache::EndSession(SessionId session) {
  SessionEndResult total;
  for (const Partition& p : partitions_) total += p.cache->EndSession(session);
  return total;
}

ReapResult PartitionedCache::ReapExpired() {
  ReapResult total;
  for (const Partition& p : partitions_) total += p.cache->ReapExpired();
  return total;
}

size_t PartitionedCache::ReleaseFenced(SessionId session) {
  size_t total = 0;
  for (const Partition& p : partitions_) total += p.cache->ReleaseFenced(session);
  return total;
}

size_t PartitionedCache::Clear(std::optional<NamespaceId> ns) {
  if (ns.has_value()) return At(*ns).Clear(ns);
  size_t total = 0;
  for (const Partition& p : partitions_) total += p.cache->Clear(std::nullopt);
  return total;
}

CacheStats PartitionedCache::Stats() const {
  if (partitions_.size() == 1) return partitions_[0].cache->Stats();
  CacheStats total;
  for (const Partition& p : partitions_) total += p.cache->Stats();
  return total;
}

}  // namespace kvstrata
