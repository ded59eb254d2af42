#include "daemon/tiering/tier_manager.h"

#include <utility>

namespace kvstrata {

TierManager::TierManager(NamespaceRegistry* namespaces, absl::Duration promotion_wait,
                         TierTable table)
    : stack_(namespaces, std::move(table)),
      write_down_(&stack_),
      promoter_(&stack_, promotion_wait),
      lookup_(&stack_) {}

TierManager::~TierManager() { Stop(); }

void TierManager::Stop() {
  lookup_.Stop();
  stack_.Stop();
}

void TierManager::AddTier(std::unique_ptr<BlockTier> storage, LowerTierOptions options) {
  stack_.AddTier(std::move(storage), options);
  write_down_.AddTier(stack_.tiers().back().get());
}

void TierManager::OnLowerTierChange(Tier tier, NamespaceId ns, absl::string_view key, bool stored,
                                    RemovalCause cause) {
  if (next_ == nullptr) return;
  // Only blocks of registered namespaces are announced.
  if (!stack_.NamespaceOf(ns).has_value()) return;
  absl::StatusOr<BlockKey> block = BlockKey::Make(ns, std::string_view(key.data(), key.size()));
  if (!block.ok()) return;
  if (stored) {
    next_->OnStored(ns, *block, tier);
  } else {
    next_->OnRemoved(ns, *block, tier, cause);
  }
}

void TierManager::OnStored(NamespaceId ns, const BlockKey& key, Tier tier) {
  if (tier == Tier::kL1) write_down_.OnStored(ns, key);
  if (next_ != nullptr) next_->OnStored(ns, key, tier);
}

void TierManager::OnRemoved(NamespaceId ns, const BlockKey& key, Tier tier, RemovalCause cause) {
  if (tier == Tier::kL1) write_down_.OnRemoved(key);
  if (next_ != nullptr) next_->OnRemoved(ns, key, tier, cause);
}

void TierManager::OnEvicting(NamespaceId ns, const BlockKey& key, uint64_t offset,
                             uint64_t length) {
  write_down_.OnEvicting(ns, key, offset, length);
  if (next_ != nullptr) next_->OnEvicting(ns, key, offset, length);
}

std::vector<Tier> TierManager::FindBelowL1(NamespaceId ns, Keys keys,
                                           const std::vector<bool>& in_l1) {
  if (!has_tiers() || keys.empty()) return {};
  std::optional<TierNamespace> tn = stack_.NamespaceOf(ns);
  if (!tn.has_value()) return {};
  return lookup_.FindChain(*tn, keys, in_l1);
}

Promoter::Marks TierManager::Promote(NamespaceId ns, std::vector<std::string> keys,
                                     std::vector<Tier> tiers, std::optional<LeaseRef> into) {
  std::optional<TierNamespace> tn = stack_.NamespaceOf(ns);
  if (!tn.has_value() || keys.empty()) return {};
  return promoter_.Promote(ns, *tn, std::move(keys), std::move(tiers), into);
}

Promoter::LoadPlan TierManager::PlanLoad(NamespaceId ns, Keys keys) {
  if (!has_tiers() || stack_.l1() == nullptr) return {};
  absl::StatusOr<std::vector<std::optional<Tier>>> in_l1 = stack_.l1()->Peek(ns, keys);
  if (!in_l1.ok()) return {};
  std::optional<TierNamespace> tn = stack_.NamespaceOf(ns);
  if (!tn.has_value()) return {};
  // While a tier's index is still being scanned (after a restart), or for a shared tier
  // whose index only caches what it saw, a block on disk is "unknown", not absent: probe
  // the files first, as a lookup does (a load may wait) -- every key: a load's keys are
  // not a chain that ends at its first absent one.
  std::vector<std::string_view> unknown_keys;
  for (size_t i = 0; i < keys.size(); ++i) {
    if ((*in_l1)[i].has_value()) continue;
    bool unknown = false;
    const absl::string_view key(keys[i].data(), keys[i].size());
    if (!stack_.Where(*tn, key, &unknown, /*trust_stale=*/true).has_value() && unknown) {
      unknown_keys.push_back(keys[i]);
    }
  }
  if (!unknown_keys.empty()) {
    lookup_.Probe(*tn, unknown_keys, promoter_.promotion_wait(), LowerLookup::Probing::kEveryKey);
  }
  return promoter_.PlanLoad(ns, *tn, keys, *in_l1);
}

void TierManager::Peek(NamespaceId ns, Keys keys, std::vector<std::optional<Tier>>* where) {
  std::optional<TierNamespace> tn = stack_.NamespaceOf(ns);
  if (tn.has_value()) lookup_.Peek(*tn, keys, where);
}

size_t TierManager::Evict(NamespaceId ns, Keys keys, std::optional<Tier> tier,
                          std::vector<bool>* marks) {
  std::optional<TierNamespace> tn = stack_.NamespaceOf(ns);
  if (!tn.has_value()) return 0;
  size_t removed = 0;
  for (const auto& lower : stack_.tiers()) {
    if (tier.has_value() && lower->level() != *tier) continue;
    for (size_t i = 0; i < keys.size(); ++i) {
      const std::string_view key = keys[i];
      if (!lower->storage->Remove(*tn, absl::string_view(key.data(), key.size()))) {
        continue;
      }
      ++removed;
      if (marks != nullptr) (*marks)[i] = true;
    }
  }
  return removed;
}

size_t TierManager::Clear(std::optional<NamespaceId> ns, std::optional<Tier> tier) {
  std::optional<std::string> fingerprint;
  if (ns.has_value()) {
    std::optional<TierNamespace> tn = stack_.NamespaceOf(*ns);
    if (!tn.has_value()) return 0;
    fingerprint = tn->fingerprint;
  }
  size_t removed = 0;
  for (const auto& lower : stack_.tiers()) {
    if (tier.has_value() && lower->level() != *tier) continue;
    removed += lower->storage->Clear(
        fingerprint.has_value() ? std::optional<absl::string_view>(*fingerprint) : std::nullopt);
  }
  return removed;
}

std::vector<LowerTierStatus> TierManager::Status() const {
  std::vector<LowerTierStatus> out;
  for (const auto& lower : stack_.tiers()) {
    LowerTierStatus st;
    st.tier = lower->level();
    st.stats = lower->storage->Stats();
    st.queued_writes = lower->queued.load();
    st.dropped_writes = lower->dropped.load();
    st.deferred_writes = lower->deferred.load();
    st.shed_writes = lower->shed.load();
    st.present_writes = lower->present.load();
    st.promotions = lower->promotions.load();
    st.promoted_blocks = lower->promoted.load();
    st.write_back = lower->options.write_back;
    out.push_back(st);
  }
  return out;
}

}  // namespace kvstrata
