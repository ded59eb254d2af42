#include "daemon/store/block_store.h"

#include <algorithm>
#include <utility>

namespace kvstrata {

absl::Duration BlockStore::LeaseTtl(absl::Duration requested) const {
  absl::Duration ttl = requested <= absl::ZeroDuration() ? options_.default_lease_ttl : requested;
  return std::min(ttl, options_.max_lease_ttl);
}

absl::StatusOr<LookupResult> BlockStore::Lookup(SessionId session, NamespaceId ns, Keys keys,
                                                std::optional<absl::Duration> lease_ttl) {
  absl::StatusOr<LookupResult> result = l1_->Lookup(session, ns, keys, lease_ttl);
  if (result.ok() && lower_ != nullptr)
    lower_->ExtendLookup(session, ns, keys, lease_ttl, &*result);
  return result;
}

BlockStore::PendingLoad BlockStore::BeginLoad(NamespaceId ns, Keys keys) {
  return lower_ != nullptr ? lower_->StartLoad(ns, keys) : PendingLoad{};
}

absl::StatusOr<LoadResult> BlockStore::FinishLoad(SessionId session, NamespaceId ns, Keys keys,
                                                  std::optional<LeaseId> lease,
                                                  PendingLoad pending) {
  if (lower_ != nullptr) lower_->WaitForLoad(pending);
  // `pending` keeps the promoted blocks pinned until AcquireLoad has pinned them itself.
  return l1_->AcquireLoad(session, ns, keys, lease);
}

absl::StatusOr<std::vector<std::optional<Tier>>> BlockStore::Peek(NamespaceId ns, Keys keys) {
  absl::StatusOr<std::vector<std::optional<Tier>>> where = l1_->Peek(ns, keys);
  if (where.ok() && lower_ != nullptr) lower_->Peek(ns, keys, &*where);
  return where;
}

absl::StatusOr<EvictCounts> BlockStore::Evict(NamespaceId ns, Keys keys,
                                              const TierSelection& tiers) {
  absl::StatusOr<std::vector<bool>> pinned = l1_->Pinned(ns, keys);
  if (!pinned.ok()) return pinned.status();
  std::vector<std::string_view> unpinned;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!(*pinned)[i]) unpinned.push_back(keys[i]);
  }
  EvictCounts counts;
  counts.pinned = keys.size() - unpinned.size();
  std::vector<bool> evicted(unpinned.size(), false);
  if (tiers.l1) {
    absl::StatusOr<size_t> l1 = l1_->Evict(ns, unpinned, &evicted);
    if (!l1.ok()) return l1.status();
    counts.l1 = *l1;
  }
  for (Tier lower : {Tier::kL2, Tier::kL3}) {
    if (lower_ == nullptr || !tiers.lower ||
        (tiers.lower_tier.has_value() && *tiers.lower_tier != lower)) {
      continue;
    }
    size_t files = lower_->Evict(ns, unpinned, lower, &evicted);
    (lower == Tier::kL2 ? counts.l2 : counts.l3) = files;
  }
  counts.keys = static_cast<size_t>(std::count(evicted.begin(), evicted.end(), true));
  return counts;
}

std::pair<size_t, size_t> BlockStore::Clear(std::optional<NamespaceId> ns,
                                            const TierSelection& tiers) {
  size_t l1 = tiers.l1 ? l1_->Clear(ns) : 0;
  size_t files = tiers.lower && lower_ != nullptr ? lower_->Clear(ns, tiers.lower_tier) : 0;
  return {l1, files};
}

absl::Status BlockStore::CheckDrainable() const {
  if (lower_ == nullptr || !lower_->has_tiers()) {
    return absl::FailedPreconditionError("no lower tier (L2/L3) is enabled: nothing to drain to");
  }
  return absl::OkStatus();
}

absl::StatusOr<size_t> BlockStore::Drain(std::optional<Tier> tier,
                                         const std::function<void(uint64_t, uint64_t)>& progress) {
  if (absl::Status s = CheckDrainable(); !s.ok()) return s;
  return lower_->Drain(tier, progress);
}

}  // namespace kvstrata
