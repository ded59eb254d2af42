// TierManager: promotion of L2/L3 blocks into L1, and loads waiting for it.
#include <algorithm>
#include <utility>

#include "daemon/tiering/tier_manager.h"

namespace kvstrata {
namespace {

constexpr size_t kPromotionChunk = 8;  // blocks per I/O task: spreads a batch over threads

}  // namespace

void TierManager::Promote(NamespaceId ns, const TierNamespace& tn, std::vector<std::string> keys,
                          std::vector<Tier> tiers, std::optional<LeaseRef> into) {
  // Claim the keys nobody is promoting yet.
  std::vector<std::string> mine;
  std::vector<Tier> mine_tiers;
  std::vector<std::shared_ptr<Promotion>> marks;
  {
    std::lock_guard<std::mutex> lock(promo_mu_);
    for (size_t i = 0; i < keys.size(); ++i) {
      absl::StatusOr<BlockKey> key = BlockKey::Make(ns, keys[i]);
      if (!key.ok() || promoting_.contains(*key)) continue;
      auto mark = std::make_shared<Promotion>();
      promoting_.emplace(*key, mark);
      marks.push_back(std::move(mark));
      mine.push_back(std::move(keys[i]));
      mine_tiers.push_back(tiers[i]);
    }
  }
  for (size_t begin = 0; begin < mine.size(); begin += kPromotionChunk) {
    const size_t end = std::min(mine.size(), begin + kPromotionChunk);
    std::vector<std::string> chunk(mine.begin() + begin, mine.begin() + end);
    std::vector<Tier> chunk_tiers(mine_tiers.begin() + begin, mine_tiers.begin() + end);
    std::vector<std::shared_ptr<Promotion>> chunk_marks(marks.begin() + begin, marks.begin() + end);
    Lower* lower = TierOf(chunk_tiers.front());
    if (lower == nullptr || lower->io == nullptr || stopped_.load()) continue;  // Cleared below.
    lower->promotions.fetch_add(1);
    lower->io->Submit(IoPool::Priority::kUrgent,
                      [this, ns, tn, chunk = std::move(chunk), chunk_tiers = std::move(chunk_tiers),
                       into, chunk_marks = std::move(chunk_marks)] {
                        PromoteChunk(ns, tn, chunk, chunk_tiers, into, chunk_marks);
                      });
  }
}

void TierManager::PromoteChunk(NamespaceId ns, const TierNamespace& tn,
                               const std::vector<std::string>& keys, const std::vector<Tier>& tiers,
                               std::optional<LeaseRef> into,
                               const std::vector<std::shared_ptr<Promotion>>& marks) {
  std::vector<std::string_view> views(keys.begin(), keys.end());
  absl::StatusOr<ReserveResult> reserved =
      cache_->ReserveStore(kDaemonSession, ns, tn.payload_bytes, views, /*bypass_admission=*/true);
  if (reserved.ok() && reserved->reservation != 0) {
    std::vector<uint32_t> written;
    for (size_t i = 0; i < keys.size(); ++i) {
      const StoreSlot& slot = reserved->slots[i];
      if (slot.status != StoreStatus::kReserved) continue;
      Lower* lower = TierOf(tiers[i]);
      absl::Span<char> dest(region_ + slot.offset, slot.length);
      const auto start = std::chrono::steady_clock::now();
      if (lower != nullptr && lower->storage->Read(tn, keys[i], dest)) {
        written.push_back(static_cast<uint32_t>(i));
        lower->promoted.fetch_add(1);
        RecordCopy(tiers[i], /*down=*/false, slot.length, Since(start));
      }
    }
    (void)cache_->CommitStore(kDaemonSession, reserved->reservation, absl::MakeConstSpan(written),
                              into);
  }
  std::lock_guard<std::mutex> lock(promo_mu_);
  for (size_t i = 0; i < keys.size(); ++i) {
    absl::StatusOr<BlockKey> key = BlockKey::Make(ns, keys[i]);
    if (key.ok()) promoting_.erase(*key);
    marks[i]->done = true;
  }
  promo_cv_.notify_all();
}

void TierManager::WaitForPromotions(const std::vector<std::shared_ptr<Promotion>>& marks) {
  const auto deadline =
      std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(promotion_wait_);
  std::unique_lock<std::mutex> lock(promo_mu_);
  promo_cv_.wait_until(lock, deadline, [&] {
    return std::all_of(marks.begin(), marks.end(), [](const auto& m) { return m->done; });
  });
}

TierManager::PendingLoad TierManager::StartLoad(NamespaceId ns,
                                                absl::Span<const std::string_view> keys) {
  if (tiers_.empty() || cache_ == nullptr) return {};
  absl::StatusOr<std::vector<std::optional<Tier>>> in_l1 = cache_->Peek(ns, keys);
  if (!in_l1.ok()) return {};
  std::optional<TierNamespace> tn = NamespaceOf(ns);
  if (!tn.has_value()) return {};
  // While a tier's index is still being scanned (after a restart), a block on disk is
  // "unknown", not absent: probe the files first, as a lookup does (a load may wait).
  std::vector<std::string_view> unknown_keys;
  for (size_t i = 0; i < keys.size(); ++i) {
    if ((*in_l1)[i].has_value()) continue;
    bool unknown = false;
    if (!CachedTier(*tn, absl::string_view(keys[i].data(), keys[i].size()), &unknown) && unknown) {
      unknown_keys.push_back(keys[i]);
    }
  }
  if (!unknown_keys.empty()) ProbeChain(*tn, unknown_keys, promotion_wait_);
  std::vector<std::shared_ptr<Promotion>> waits;
  std::vector<std::string> promote;
  std::vector<Tier> tiers;
  {
    std::lock_guard<std::mutex> lock(promo_mu_);
    for (size_t i = 0; i < keys.size(); ++i) {
      if ((*in_l1)[i].has_value()) continue;
      absl::StatusOr<BlockKey> key = BlockKey::Make(ns, keys[i]);
      if (!key.ok()) continue;
      auto it = promoting_.find(*key);
      if (it != promoting_.end()) {
        waits.push_back(it->second);
        continue;
      }
      bool unknown = false;
      std::optional<Tier> tier =
          CachedTier(*tn, absl::string_view(keys[i].data(), keys[i].size()), &unknown);
      if (tier.has_value()) {
        promote.emplace_back(keys[i]);
        tiers.push_back(*tier);
      }
    }
  }
  PendingLoad load;
  LoadGuard& guard = load.guard;
  if (!promote.empty()) {
    std::vector<BlockKey> started;
    for (const std::string& k : promote) {
      absl::StatusOr<BlockKey> key = BlockKey::Make(ns, k);
      if (key.ok()) started.push_back(*key);
    }
    // The daemon's own lease holds what lands until the caller's AcquireLoad pins it.
    std::optional<LeaseRef> into;
    absl::StatusOr<LeaseId> lease =
        cache_->CreateEmptyLease(kDaemonSession, ns, promotion_wait_ + absl::Seconds(30));
    if (lease.ok()) {
      into = LeaseRef{kDaemonSession, *lease};
      guard = LoadGuard(cache_, *lease);
      // The blocks already in L1 are pinned too: the promotions below make room by
      // evicting, and must not evict what this load is about to read.
      std::vector<std::string_view> present;
      for (size_t i = 0; i < keys.size(); ++i) {
        if ((*in_l1)[i].has_value()) present.push_back(keys[i]);
      }
      if (!present.empty()) cache_->AddToLease(*into, ns, present);
    }
    Promote(ns, *tn, std::move(promote), std::move(tiers), into);
    std::lock_guard<std::mutex> lock(promo_mu_);
    for (const BlockKey& key : started) {
      auto it = promoting_.find(key);
      if (it != promoting_.end()) waits.push_back(it->second);
    }
  }
  load.waits = std::move(waits);
  return load;
}

}  // namespace kvstrata
