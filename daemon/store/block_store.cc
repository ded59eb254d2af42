#include "daemon/store/block_store.h"

#include <algorithm>
#include <string>
#include <utility>

namespace kvstrata {

absl::Duration BlockStore::LeaseTtl(absl::Duration requested) const {
  absl::Duration ttl = requested <= absl::ZeroDuration() ? options_.default_lease_ttl : requested;
  return std::min(ttl, options_.max_lease_ttl);
}

absl::StatusOr<LookupResult> BlockStore::Lookup(SessionId session, NamespaceId ns, Keys keys,
                                                std::optional<absl::Duration> lease_ttl,
                                                LookupPromotion promotion) {
  // L1 is asked once: its answer covers the keys past its first miss too.
  absl::StatusOr<LookupResult> result =
      l1_->Lookup(session, ns, keys, lease_ttl, /*past_miss=*/lower_ != nullptr);
  if (!result.ok() || lower_ == nullptr) return result;
  lower_->write_down().CountHits(ns, keys.first(result->hits));
  if (result->hits >= keys.size()) return result;
  const Keys rest = keys.subspan(result->hits);
  std::vector<Tier> below = lower_->FindBelowL1(ns, rest, result->in_l1_past_miss);
  if (below.empty()) return result;
  if (lease_ttl.has_value()) {
    LeaseBelowL1(session, ns, rest, below, *lease_ttl, promotion, &*result);
  }
  result->hits += below.size();
  result->tiers.insert(result->tiers.end(), below.begin(), below.end());
  return result;
}

void BlockStore::LeaseBelowL1(SessionId session, NamespaceId ns, Keys keys,
                              const std::vector<Tier>& tiers, absl::Duration ttl,
                              LookupPromotion promotion, LookupResult* result) {
  if (!result->lease.has_value()) {
    absl::StatusOr<LeaseId> lease = l1_->CreateEmptyLease(session, ns, ttl);
    if (lease.ok()) result->lease = *lease;
  }
  std::optional<LeaseRef> into;
  if (result->lease.has_value()) into = LeaseRef{session, *result->lease};
  // Past the first L1 miss, blocks still in L1 join the lease as they are; the others are
  // promoted into it.
  std::vector<std::string_view> in_l1;
  std::vector<std::string> promote;
  std::vector<Tier> promote_tiers;
  for (size_t i = 0; i < tiers.size(); ++i) {
    if (tiers[i] == Tier::kL1) {
      in_l1.push_back(keys[i]);
    } else if (promotion == LookupPromotion::kStart) {
      promote.emplace_back(keys[i]);
      promote_tiers.push_back(tiers[i]);
    }
  }
  if (into.has_value() && !in_l1.empty()) l1_->AddToLease(*into, ns, in_l1);
  if (!promote.empty())
    (void)lower_->Promote(ns, std::move(promote), std::move(promote_tiers), into);
}

PendingLoad BlockStore::BeginLoad(NamespaceId ns, Keys keys) {
  PendingLoad pending;
  if (lower_ == nullptr) return pending;
  Promoter::LoadPlan plan = lower_->PlanLoad(ns, keys);
  pending.waits() = std::move(plan.in_flight);
  if (plan.promote.empty()) return pending;
  // The daemon's own lease holds what lands until the caller's AcquireLoad pins it. The
  // load's blocks already in L1 join it too: the promotions make room by evicting, and
  // must not evict what this load is about to read.
  std::optional<LeaseRef> into;
  absl::StatusOr<LeaseId> lease =
      l1_->CreateEmptyLease(kDaemonSession, ns, lower_->promotion_wait() + absl::Seconds(30));
  if (lease.ok()) {
    into = LeaseRef{kDaemonSession, *lease};
    pending.HoldLease(l1_, *lease);
    l1_->AddToLease(*into, ns, keys);
  }
  Promoter::Marks started =
      lower_->Promote(ns, std::move(plan.promote), std::move(plan.tiers), into);
  pending.waits().insert(pending.waits().end(), started.begin(), started.end());
  return pending;
}

absl::StatusOr<LoadResult> BlockStore::FinishLoad(SessionId session, NamespaceId ns, Keys keys,
                                                  std::optional<LeaseId> lease,
                                                  PendingLoad pending) {
  if (lower_ != nullptr) lower_->promoter().Wait(pending.waits());
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
  for (const LowerTierStatus& st : LowerTiers()) {
    const Tier lower = st.tier;
    if (!tiers.lower || (tiers.lower_tier.has_value() && *tiers.lower_tier != lower)) continue;
    counts.files[TierIndex(lower)] = lower_->Evict(ns, unpinned, lower, &evicted);
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
    return absl::FailedPreconditionError("no lower tier is enabled: nothing to drain to");
  }
  return absl::OkStatus();
}

absl::StatusOr<size_t> BlockStore::Drain(std::optional<Tier> tier,
                                         const std::function<void(uint64_t, uint64_t)>& progress) {
  if (absl::Status s = CheckDrainable(); !s.ok()) return s;
  return lower_->write_down().Drain(tier, progress);
}

}  // namespace kvstrata
