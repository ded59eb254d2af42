#include "daemon/tiering/write_down.h"

#include <utility>

namespace kvstrata {
namespace {

constexpr size_t kMaxTrackedHits = 1 << 20;
constexpr size_t kMaxDeferred = 1 << 20;  // per tier; past this a deferred store is dropped

absl::string_view Raw(const BlockKey& key) {
  const std::string_view bytes = key.bytes();
  return absl::string_view(bytes.data(), bytes.size());
}

}  // namespace

void WriteDown::AddTier(LowerTier* tier) {
  auto queue = std::make_unique<Queue>();
  queue->tier = tier;
  counts_hits_ = counts_hits_ || tier->options.write_down_min_hits > 0;
  queues_.push_back(std::move(queue));
}

void WriteDown::OnStored(NamespaceId ns, const BlockKey& key) {
  for (auto& queue : queues_) {
    const LowerTierOptions& options = queue->tier->options;
    if (!options.write_back && options.write_down_min_hits == 0 &&
        !IndexHolds(*queue->tier, ns, key) && !Defer(*queue, key)) {
      Enqueue(*queue, ns, key, "");
    }
  }
}

void WriteDown::OnRemoved(const BlockKey& key) {
  for (auto& queue : queues_) {
    if (queue->tier->deferred.load() > 0 && Undefer(*queue, key)) queue->tier->shed.fetch_add(1);
  }
}

bool WriteDown::Defer(Queue& queue, const BlockKey& key) {
  LowerTier& lower = *queue.tier;
  if (!lower.options.defer_when_full || lower.queued.load() < lower.options.write_queue_blocks) {
    return false;
  }
  MutexLock lock(&queue.pending_mu);
  if (queue.deferred.size() >= kMaxDeferred) {
    lower.dropped.fetch_add(1);
  } else if (queue.deferred.insert(key).second) {
    lower.deferred.fetch_add(1);
  }
  return true;
}

bool WriteDown::Undefer(Queue& queue, const BlockKey& key) {
  MutexLock lock(&queue.pending_mu);
  return UndeferLocked(queue, key);
}

bool WriteDown::UndeferLocked(Queue& queue, const BlockKey& key) {
  if (queue.deferred.erase(key) == 0) return false;
  queue.tier->deferred.fetch_sub(1);
  return true;
}

void WriteDown::OnEvicting(NamespaceId ns, const BlockKey& key, uint64_t offset, uint64_t length) {
  for (auto& queue : queues_) {
    const LowerTierOptions& options = queue->tier->options;
    if (!options.write_back) {
      MutexLock lock(&queue->pending_mu);
      auto it = queue->pending.find(key);
      if (it == queue->pending.end()) continue;
      if (TakeCopyRoom(*queue, length)) {
        it->second->copy.assign(stack_->region(offset), length);
        continue;
      }
      // No room for more copies: the write is shed (a started one finds neither the block
      // nor a copy and writes nothing).
      queue->tier->shed.fetch_add(1);
      if (!it->second->started) {
        it->second->cancelled = true;
        queue->pending.erase(it);
        queue->tier->queued.fetch_sub(1);
      }
      continue;
    }
    if (options.write_down_min_hits > 0) {
      MutexLock lock(&hits_mu_);
      auto it = l1_hits_.find(key);
      if (it == l1_hits_.end() || it->second < options.write_down_min_hits) continue;
    }
    if (IndexHolds(*queue->tier, ns, key)) continue;  // before copying the bytes out
    if (!TakeCopyRoom(*queue, length)) {
      queue->tier->dropped.fetch_add(1);
      continue;
    }
    if (!Enqueue(*queue, ns, key, std::string(stack_->region(offset), length))) {
      ReturnCopyRoom(*queue, length);
    }
  }
}

bool WriteDown::TakeCopyRoom(Queue& queue, uint64_t bytes) {
  const uint64_t limit = queue.tier->options.evicted_copy_bytes;
  uint64_t held = queue.copied_bytes.load();
  do {
    if (held + bytes > limit) return false;
  } while (!queue.copied_bytes.compare_exchange_weak(held, held + bytes));
  return true;
}

void WriteDown::CountHits(NamespaceId ns, absl::Span<const std::string_view> keys) {
  bool backlogged = false;  // some tier has blocks waiting for a hit, or will soon
  for (auto& queue : queues_) backlogged = backlogged || Backlogged(*queue->tier);
  if (!counts_hits_ && !backlogged) return;
  for (std::string_view k : keys) {
    absl::StatusOr<BlockKey> key = BlockKey::Make(ns, k);
    if (!key.ok()) continue;
    for (auto& queue : queues_) {
      if (backlogged && Backlogged(*queue->tier) && Reused(*queue, *key)) {
        Enqueue(*queue, ns, *key, "", /*reused=*/true);
      }
    }
    if (!counts_hits_) continue;
    uint32_t hits;
    {
      MutexLock lock(&hits_mu_);
      if (l1_hits_.size() >= kMaxTrackedHits) l1_hits_.clear();
      hits = ++l1_hits_[*key];
    }
    for (auto& queue : queues_) {
      const LowerTierOptions& options = queue->tier->options;
      if (!options.write_back && options.write_down_min_hits == hits) {
        Enqueue(*queue, ns, *key, "");
      }
    }
  }
}

bool WriteDown::Enqueue(Queue& queue, NamespaceId ns, const BlockKey& key, std::string copied,
                        bool reused) {
  LowerTier& lower = *queue.tier;
  if (lower.io == nullptr || stack_->stopped()) return false;
  if (copied.empty() && IndexHolds(lower, ns, key)) return false;
  if (lower.queued.load() >= lower.options.write_queue_blocks && !(reused && Preempt(queue))) {
    // Counted once: kvstrata_stores_dropped_total{reason="queue_full"} reads this.
    lower.dropped.fetch_add(1);
    return false;
  }
  lower.queued.fetch_add(1);
  auto pending = std::make_shared<PendingWrite>();
  pending->copy = std::move(copied);
  const bool from_l1 = pending->copy.empty();
  if (from_l1) {
    MutexLock lock(&queue.pending_mu);
    queue.pending[key] = pending;
    if (!reused && lower.options.defer_when_full) {
      while (!queue.backlog.empty() && queue.backlog.front().second->started) {
        queue.backlog.pop_front();
      }
      queue.backlog.emplace_back(key, pending);
    }
  }
  // A block reused while it waited is written before the rest of the backlog.
  const IoPool::Priority priority =
      reused ? IoPool::Priority::kNormal : IoPool::Priority::kBackground;
  lower.io->Submit(priority, [this, &queue, ns, key, pending, from_l1] {
    LowerTier& lower = *queue.tier;
    if (from_l1) {
      MutexLock lock(&queue.pending_mu);
      if (pending->cancelled) return;  // Preempt gave its place in the queue back
      pending->started = true;
    }
    std::optional<TierNamespace> tn = stack_->NamespaceOf(ns);
    if (tn.has_value() && !from_l1) {
      // A refusal or failure is the tier's to count (write_errors, refused_writes).
      (void)lower.storage->Write(*tn, Raw(key), pending->copy);
    } else if (tn.has_value()) {
      WriteFromL1(queue, ns, *tn, Raw(key), pending.get());
    }
    {
      MutexLock lock(&queue.pending_mu);
      if (from_l1) {
        auto it = queue.pending.find(key);
        if (it != queue.pending.end() && it->second == pending) queue.pending.erase(it);
      }
      // The backlog may hold this entry until later writes trim it: not its bytes.
      ReturnCopyRoom(queue, pending->copy.size());
      std::string().swap(pending->copy);
    }
    lower.queued.fetch_sub(1);
  });
  return true;
}

bool WriteDown::Reused(Queue& queue, const BlockKey& key) {
  MutexLock lock(&queue.pending_mu);
  if (UndeferLocked(queue, key)) return true;
  auto it = queue.pending.find(key);
  if (it != queue.pending.end()) it->second->reused = true;  // queued: Preempt spares it
  return false;
}

bool WriteDown::Preempt(Queue& queue) {
  MutexLock lock(&queue.pending_mu);
  while (!queue.backlog.empty()) {
    auto [key, victim] = std::move(queue.backlog.back());
    queue.backlog.pop_back();
    // Running, or its block already left L1 (OnEvicting copied it): not taken.
    if (victim->started || victim->cancelled || victim->reused || !victim->copy.empty()) continue;
    victim->cancelled = true;
    auto it = queue.pending.find(key);
    if (it != queue.pending.end() && it->second == victim) queue.pending.erase(it);
    if (queue.deferred.size() < kMaxDeferred && queue.deferred.insert(key).second) {
      queue.tier->deferred.fetch_add(1);
    }
    queue.tier->queued.fetch_sub(1);
    return true;
  }
  return false;
}

bool WriteDown::IndexHolds(LowerTier& lower, NamespaceId ns, const BlockKey& key) {
  if (lower.storage->shared()) return false;  // checked when the write runs (AlreadyThere)
  std::optional<TierNamespace> tn = stack_->NamespaceOf(ns);
  if (!tn.has_value() || lower.storage->Cached(*tn, Raw(key)) != BlockTier::Presence::kPresent) {
    return false;
  }
  lower.present.fetch_add(1);
  return true;
}

bool WriteDown::AlreadyThere(LowerTier& lower, const TierNamespace& tn, absl::string_view key) {
  if (lower.storage->Cached(tn, key) != BlockTier::Presence::kPresent) return false;
  // A shared tier's index may name a file another node deleted since it was last seen
  // (its trim, an rm): ask the disk (one stat) rather than skip the write for good. A
  // probe that finds it gone drops it from the index, so the write below goes through.
  return !lower.storage->shared() || lower.storage->Probe(tn, key);
}

bool WriteDown::WriteFromL1(Queue& queue, NamespaceId ns, const TierNamespace& tn,
                            absl::string_view key, const PendingWrite* fallback) {
  LowerTier& lower = *queue.tier;
  if (AlreadyThere(lower, tn, key)) return true;
  const std::string_view view(key.data(), key.size());
  absl::StatusOr<LoadResult> pinned =
      stack_->l1()->AcquireLoad(kDaemonSession, ns, absl::MakeConstSpan(&view, 1), std::nullopt);
  if (!pinned.ok() || pinned->load == 0) {
    // Evicted from L1 before its turn: OnEvicting saved the bytes (under the cache lock,
    // which AcquireLoad also took, so the copy is complete by now).
    if (fallback == nullptr) return false;
    std::string copy;
    {
      MutexLock lock(&queue.pending_mu);
      copy = fallback->copy;
    }
    return !copy.empty() && lower.storage->Write(tn, key, copy).ok();
  }
  const LoadSlot& slot = pinned->slots[0];
  absl::Status written =
      lower.storage->Write(tn, key, absl::string_view(stack_->region(slot.offset), slot.length));
  (void)stack_->l1()->ReleaseLoad(kDaemonSession, pinned->load);
  return written.ok();
}

absl::StatusOr<size_t> WriteDown::Drain(std::optional<Tier> tier,
                                        const std::function<void(uint64_t, uint64_t)>& progress) {
  if (stack_->l1() == nullptr) return absl::FailedPreconditionError("L1 is not ready");
  std::vector<Queue*> targets;
  for (auto& queue : queues_) {
    if (!tier.has_value() || queue->tier->level() == *tier) targets.push_back(queue.get());
  }
  if (targets.empty()) return absl::FailedPreconditionError("no such lower tier is enabled");
  std::vector<BlockKey> keys = stack_->l1()->VisibleKeys(std::nullopt);
  const uint64_t total = keys.size() * targets.size();
  uint64_t done = 0;
  size_t written = 0;
  progress(0, total);
  for (Queue* queue : targets) {
    for (const BlockKey& key : keys) {
      std::optional<TierNamespace> tn = stack_->NamespaceOf(key.ns());
      if (tn.has_value() && !AlreadyThere(*queue->tier, *tn, Raw(key))) {
        written += WriteFromL1(*queue, key.ns(), *tn, Raw(key), nullptr);
      }
      if (++done % 64 == 0 || done == total) progress(done, total);
    }
  }
  return written;
}

}  // namespace kvstrata
