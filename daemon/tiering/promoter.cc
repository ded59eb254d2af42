#include "daemon/tiering/promoter.h"

#include <algorithm>
#include <chrono>
#include <string_view>
#include <utility>

namespace kvstrata {

size_t Promoter::BlocksPerTask(size_t blocks, size_t io_threads) {
  const size_t threads = std::max<size_t>(io_threads, 1);
  return std::clamp<size_t>((blocks + threads - 1) / threads, 1, kMaxBlocksPerTask);
}

Promoter::Marks Promoter::Promote(NamespaceId ns, const TierNamespace& tn,
                                  std::vector<std::string> keys, std::vector<Tier> tiers,
                                  std::optional<LeaseRef> into) {
  // Claim the keys nobody is promoting yet; note the others' marks.
  std::vector<std::string> mine;
  std::vector<Tier> mine_tiers;
  Marks started, all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < keys.size(); ++i) {
      absl::StatusOr<BlockKey> key = BlockKey::Make(ns, keys[i]);
      if (!key.ok()) continue;
      auto it = promoting_.find(*key);
      if (it != promoting_.end()) {
        all.push_back(it->second);
        continue;
      }
      auto mark = std::make_shared<Promotion>();
      promoting_.emplace(*key, mark);
      all.push_back(mark);
      started.push_back(std::move(mark));
      mine.push_back(std::move(keys[i]));
      mine_tiers.push_back(tiers[i]);
    }
  }
  // Spread over the threads of the first key's tier (a batch mixing L2 and L3 keys is split
  // by that one's count).
  const LowerTier* first = mine.empty() ? nullptr : stack_->TierOf(mine_tiers.front());
  const size_t per_task =
      BlocksPerTask(mine.size(), first == nullptr ? 1 : first->options.io_threads);
  for (size_t begin = 0; begin < mine.size(); begin += per_task) {
    const size_t end = std::min(mine.size(), begin + per_task);
    std::vector<std::string> chunk(mine.begin() + begin, mine.begin() + end);
    std::vector<Tier> chunk_tiers(mine_tiers.begin() + begin, mine_tiers.begin() + end);
    Marks chunk_marks(started.begin() + begin, started.begin() + end);
    LowerTier* lower = stack_->TierOf(chunk_tiers.front());
    if (lower == nullptr || lower->io == nullptr || stack_->stopped()) {
      Finish(ns, chunk, chunk_marks);  // Stopping: nothing comes up.
      continue;
    }
    lower->promotions.fetch_add(1);
    lower->io->Submit(IoPool::Priority::kUrgent,
                      [this, ns, tn, chunk = std::move(chunk), chunk_tiers = std::move(chunk_tiers),
                       into, chunk_marks = std::move(chunk_marks)] {
                        PromoteChunk(ns, tn, chunk, chunk_tiers, into, chunk_marks);
                      });
  }
  return all;
}

void Promoter::PromoteChunk(NamespaceId ns, const TierNamespace& tn,
                            const std::vector<std::string>& keys, const std::vector<Tier>& tiers,
                            std::optional<LeaseRef> into, const Marks& marks) {
  std::vector<std::string_view> views(keys.begin(), keys.end());
  absl::StatusOr<ReserveResult> reserved = stack_->l1()->ReserveStore(
      kDaemonSession, ns, tn.payload_bytes, views, /*bypass_admission=*/true);
  if (reserved.ok() && reserved->reservation != 0) {
    std::vector<uint32_t> written = ReadReserved(tn, keys, tiers, *reserved);
    (void)stack_->l1()->CommitStore(kDaemonSession, reserved->reservation,
                                    absl::MakeConstSpan(written), into);
  }
  Finish(ns, keys, marks);
}

std::vector<uint32_t> Promoter::ReadReserved(const TierNamespace& tn,
                                             const std::vector<std::string>& keys,
                                             const std::vector<Tier>& tiers,
                                             const ReserveResult& reserved) {
  std::vector<uint32_t> read;
  std::vector<bool> taken(keys.size(), false);
  for (size_t first = 0; first < keys.size(); ++first) {
    if (taken[first] || reserved.slots[first].status != StoreStatus::kReserved) continue;
    std::vector<uint32_t> batch;
    std::vector<absl::string_view> batch_keys;
    std::vector<absl::Span<char>> dests;
    for (size_t i = first; i < keys.size(); ++i) {
      const StoreSlot& slot = reserved.slots[i];
      if (taken[i] || tiers[i] != tiers[first] || slot.status != StoreStatus::kReserved) continue;
      taken[i] = true;
      batch.push_back(static_cast<uint32_t>(i));
      batch_keys.emplace_back(keys[i]);
      dests.emplace_back(stack_->region(slot.offset), slot.length);
    }
    LowerTier* lower = stack_->TierOf(tiers[first]);
    if (lower == nullptr) continue;
    // The tier records each block it read (kvstrata_transfer_*{direction="l2_to_l1"}, ...).
    absl::StatusOr<std::vector<bool>> hits = lower->storage->ReadMany(tn, batch_keys, dests);
    if (!hits.ok()) continue;  // Logged and counted by the tier; nothing comes up.
    for (size_t j = 0; j < batch.size(); ++j) {
      if (!(*hits)[j]) continue;
      read.push_back(batch[j]);
      lower->promoted.fetch_add(1);
    }
  }
  std::sort(read.begin(), read.end());
  return read;
}

void Promoter::Finish(NamespaceId ns, const std::vector<std::string>& keys, const Marks& marks) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < keys.size(); ++i) {
    absl::StatusOr<BlockKey> key = BlockKey::Make(ns, keys[i]);
    if (key.ok()) promoting_.erase(*key);
    marks[i]->done = true;
  }
  cv_.notify_all();
}

void Promoter::Wait(const Marks& marks) {
  if (marks.empty()) return;
  const auto deadline =
      std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(promotion_wait_);
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_until(lock, deadline, [&] {
    return std::all_of(marks.begin(), marks.end(), [](const auto& m) { return m->done; });
  });
}

Promoter::LoadPlan Promoter::PlanLoad(NamespaceId ns, const TierNamespace& tn,
                                      absl::Span<const std::string_view> keys,
                                      const std::vector<std::optional<Tier>>& in_l1) {
  LoadPlan plan;
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (in_l1[i].has_value()) continue;
    absl::StatusOr<BlockKey> key = BlockKey::Make(ns, keys[i]);
    if (!key.ok()) continue;
    auto it = promoting_.find(*key);
    if (it != promoting_.end()) {
      plan.in_flight.push_back(it->second);
      continue;
    }
    bool unknown = false;
    std::optional<Tier> tier =
        stack_->Where(tn, absl::string_view(keys[i].data(), keys[i].size()), &unknown,
                      /*trust_stale=*/true);  // The read is the check.
    if (tier.has_value()) {
      plan.promote.emplace_back(keys[i]);
      plan.tiers.push_back(*tier);
    }
  }
  return plan;
}

}  // namespace kvstrata
