// LocalFileTier: the local kind's index bookkeeping and eviction (its warm-up scan is in
// file_tier_scan.cc).
#include "daemon/tiers/local_file_tier.h"

#include <algorithm>
#include <utility>

namespace kvstrata {
namespace {

absl::string_view KeyBytes(const BlockKey& key) { return {key.bytes().data(), key.bytes().size()}; }

}  // namespace

LocalFileTier::LocalFileTier(FileTierOptions options, std::unique_ptr<EvictionPolicy> policy)
    : FileTier(std::move(options)), policy_(std::move(policy)) {}

void LocalFileTier::IndexedLocked(const BlockKey& key) {
  uint64_t id = key.Fingerprint();
  if (by_id_.emplace(id, key).second) policy_->OnInsert(id);
}

void LocalFileTier::UnindexedLocked(const BlockKey& key) {
  uint64_t id = key.Fingerprint();
  auto b = by_id_.find(id);
  if (b != by_id_.end() && b->second == key) {
    by_id_.erase(b);
    policy_->OnErase(id);
  }
}

void LocalFileTier::ReadingLocked(const BlockKey& key) { policy_->OnAccess(key.Fingerprint()); }

bool LocalFileTier::EvictForLocked(uint64_t incoming, std::vector<std::string>* doomed) {
  incoming += writing_bytes_;
  const double capacity = static_cast<double>(EffectiveCapacityLocked());
  if (static_cast<double>(used_bytes_ + incoming) <= options_.high_watermark * capacity) {
    return true;
  }
  auto evictable = [this](EvictionPolicy::Id id) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    auto b = by_id_.find(id);
    if (b == by_id_.end()) return false;
    auto it = index_.find(b->second);
    return it != index_.end() && it->second.readers == 0;
  };
  while (static_cast<double>(used_bytes_ + incoming) > options_.low_watermark * capacity) {
    std::optional<EvictionPolicy::Id> victim = policy_->PickVictim(evictable);
    if (!victim.has_value()) break;
    BlockKey key = by_id_.at(*victim);
    by_id_.erase(*victim);  // The policy already forgot it.
    auto it = index_.find(key);
    if (it->second.announced) AnnounceLocked(key, /*stored=*/false, RemovalCause::kEvicted);
    used_bytes_ -= std::min(used_bytes_, it->second.file_bytes);
    index_.erase(it);
    doomed->push_back(PathOf(FingerprintOfLocked(key.ns()), KeyBytes(key)));
    ++counters_.evictions;
  }
  return static_cast<double>(used_bytes_ + incoming) <= options_.high_watermark * capacity;
}

}  // namespace kvstrata
