#include "daemon/tiering/tier_stack.h"

#include <utility>

namespace kvstrata {

void TierStack::AddTier(std::unique_ptr<BlockTier> storage, LowerTierOptions options) {
  auto lower = std::make_unique<LowerTier>();
  lower->io = std::make_unique<IoPool>(options.io_threads);
  lower->storage = std::move(storage);
  lower->options = options;
  lower->storage->SetMetrics(metrics_);
  tiers_.push_back(std::move(lower));
}

void TierStack::SetMetrics(MetricsSink* metrics) {
  metrics_ = metrics;
  for (auto& lower : tiers_) lower->storage->SetMetrics(metrics);
}

void TierStack::Stop() {
  // Stopped, not destroyed: a task still running on one pool may submit to another
  // (a promotion's commit queues a write) while that one stops.
  stopped_.store(true);
  for (auto& lower : tiers_) {
    if (lower->io != nullptr) lower->io->Stop();
  }
  // Then the tiers' own threads (an L3 trim mid-scan announces removals): after this no
  // callback comes in, so the stack's owner may go.
  for (auto& lower : tiers_) lower->storage->Stop();
}

LowerTier* TierStack::TierOf(Tier tier) const {
  for (const auto& lower : tiers_) {
    if (lower->level() == tier) return lower.get();
  }
  return nullptr;
}

std::optional<TierNamespace> TierStack::NamespaceOf(NamespaceId ns) {
  {
    MutexLock lock(&ns_mu_);
    auto it = ns_cache_.find(ns);
    if (it != ns_cache_.end()) return it->second;
  }
  std::optional<NamespaceInfo> info = namespaces_->Find(ns);
  if (!info.has_value()) return std::nullopt;
  TierNamespace tn{info->fingerprint, info->spec, info->bytes_per_block, info->id};
  MutexLock lock(&ns_mu_);
  ns_cache_.emplace(ns, tn);
  return tn;
}

std::optional<Tier> TierStack::Where(const TierNamespace& tn, absl::string_view key, bool* unknown,
                                     bool trust_stale) const {
  for (const auto& lower : tiers_) {
    switch (lower->storage->Cached(tn, key)) {
      case BlockTier::Presence::kPresent:
        return lower->level();
      case BlockTier::Presence::kStale:
        if (trust_stale) return lower->level();
        *unknown = true;
        break;
      case BlockTier::Presence::kUnknown:
        *unknown = true;
        break;
      case BlockTier::Presence::kAbsent:
        break;
    }
  }
  return std::nullopt;
}

}  // namespace kvstrata
