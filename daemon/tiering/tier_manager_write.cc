// TierManager: writing L1 blocks down to the file tiers (write-through, write-back, drain).
#include <utility>

#include "daemon/tiering/tier_manager.h"

namespace kvstrata {
namespace {

constexpr size_t kMaxTrackedHits = 1 << 20;

}  // namespace

void TierManager::CountHit(NamespaceId ns, const BlockKey& key) {
  uint32_t hits;
  {
    MutexLock lock(&hits_mu_);
    if (l1_hits_.size() >= kMaxTrackedHits) l1_hits_.clear();
    hits = ++l1_hits_[key];
  }
  for (auto& lower : tiers_) {
    if (!lower->options.write_back && lower->options.write_down_min_hits == hits) {
      QueueWrite(*lower, ns, key, "");
    }
  }
}

void TierManager::RecordCopy(Tier tier, bool down, uint64_t bytes, absl::Duration took) {
  if (metrics_ == nullptr) return;
  metrics_->RecordTransfer(tier, down ? CopyDirection::kDown : CopyDirection::kUp, bytes, took);
}

void TierManager::RecordDroppedWrite(Tier tier) {
  if (metrics_ == nullptr) return;
  metrics_->RecordStoreDropped(tier, DropReason::kQueueFull, 1);
}

void TierManager::QueueWrite(Lower& lower, NamespaceId ns, const BlockKey& key,
                             std::string copied) {
  if (lower.io == nullptr || stopped_.load()) return;
  if (lower.queued.load() >= lower.options.write_queue_blocks) {
    lower.dropped.fetch_add(1);
    RecordDroppedWrite(lower.storage->level());
    return;
  }
  lower.queued.fetch_add(1);
  auto pending = std::make_shared<PendingWrite>();
  pending->copy = std::move(copied);
  const bool from_l1 = pending->copy.empty();
  if (from_l1) {
    MutexLock lock(&lower.pending_mu);
    lower.pending[key] = pending;
  }
  lower.io->Submit(IoPool::Priority::kBackground, [this, &lower, ns, key, pending, from_l1] {
    const std::string_view bytes = key.bytes();
    const absl::string_view raw(bytes.data(), bytes.size());
    std::optional<TierNamespace> tn = NamespaceOf(ns);
    if (tn.has_value() && !from_l1) {
      const auto start = std::chrono::steady_clock::now();
      if (lower.storage->Write(*tn, raw, pending->copy).ok()) {
        RecordCopy(lower.storage->level(), true, pending->copy.size(), Since(start));
      }
    } else if (tn.has_value()) {
      WriteFromL1(lower, ns, *tn, raw, pending.get());
    }
    if (from_l1) {
      MutexLock lock(&lower.pending_mu);
      auto it = lower.pending.find(key);
      if (it != lower.pending.end() && it->second == pending) lower.pending.erase(it);
    }
    lower.queued.fetch_sub(1);
  });
}

bool TierManager::WriteFromL1(Lower& lower, NamespaceId ns, const TierNamespace& tn,
                              absl::string_view key, const PendingWrite* fallback) {
  if (lower.storage->Cached(tn.fingerprint, key) == BlockTier::Presence::kPresent) return true;
  const std::string_view view(key.data(), key.size());
  absl::StatusOr<LoadResult> pinned =
      cache_->AcquireLoad(kDaemonSession, ns, absl::MakeConstSpan(&view, 1), std::nullopt);
  if (!pinned.ok() || pinned->load == 0) {
    // Evicted from L1 before its turn: OnEvicting saved the bytes (under the cache lock,
    // which AcquireLoad also took, so the copy is complete by now).
    if (fallback == nullptr) return false;
    std::string copy;
    {
      MutexLock lock(&lower.pending_mu);
      copy = fallback->copy;
    }
    const auto start = std::chrono::steady_clock::now();
    if (copy.empty() || !lower.storage->Write(tn, key, copy).ok()) return false;
    RecordCopy(lower.storage->level(), true, copy.size(), Since(start));
    return true;
  }
  const LoadSlot& slot = pinned->slots[0];
  const auto start = std::chrono::steady_clock::now();
  absl::Status written =
      lower.storage->Write(tn, key, absl::string_view(region_ + slot.offset, slot.length));
  (void)cache_->ReleaseLoad(kDaemonSession, pinned->load);
  if (written.ok()) RecordCopy(lower.storage->level(), true, slot.length, Since(start));
  return written.ok();
}

absl::StatusOr<size_t> TierManager::Drain(std::optional<Tier> tier,
                                          const std::function<void(uint64_t, uint64_t)>& progress) {
  if (cache_ == nullptr) return absl::FailedPreconditionError("L1 is not ready");
  std::vector<Lower*> targets;
  for (auto& lower : tiers_) {
    if (!tier.has_value() || lower->storage->level() == *tier) targets.push_back(lower.get());
  }
  if (targets.empty()) return absl::FailedPreconditionError("no such lower tier is enabled");
  std::vector<BlockKey> keys = cache_->VisibleKeys(std::nullopt);
  const uint64_t total = keys.size() * targets.size();
  uint64_t done = 0;
  size_t written = 0;
  progress(0, total);
  for (Lower* lower : targets) {
    for (const BlockKey& key : keys) {
      std::optional<TierNamespace> tn = NamespaceOf(key.ns());
      const std::string_view bytes = key.bytes();
      const absl::string_view raw(bytes.data(), bytes.size());
      if (tn.has_value() &&
          lower->storage->Cached(tn->fingerprint, raw) != BlockTier::Presence::kPresent) {
        written += WriteFromL1(*lower, key.ns(), *tn, raw, nullptr);
      }
      if (++done % 64 == 0 || done == total) progress(done, total);
    }
  }
  return written;
}

}  // namespace kvstrata
