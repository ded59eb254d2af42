// BlockCache store path: ReserveStore, CommitStore, AbortStore.
#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/cache/block_cache.h"

namespace kvstrata {

absl::StatusOr<ReserveResult> BlockCache::ReserveStore(SessionId session, NamespaceId ns,
                                                       uint64_t block_bytes, Keys raw,
                                                       bool bypass_admission,
                                                       absl::Span<const uint32_t> slot_order) {
  absl::StatusOr<std::vector<BlockKey>> keys = MakeBlockKeys(ns, raw, options_.max_keys_per_call);
  if (!keys.ok()) return keys.status();
  if (block_bytes == 0) return absl::InvalidArgumentError("block size is 0");
  if (!slot_order.empty()) {
    std::vector<bool> seen(keys->size(), false);
    bool permutation = slot_order.size() == keys->size();
    for (size_t k = 0; permutation && k < slot_order.size(); ++k) {
      permutation = slot_order[k] < seen.size() && !seen[slot_order[k]];
      if (permutation) seen[slot_order[k]] = true;
    }
    if (!permutation) {
      return absl::InvalidArgumentError(absl::StrCat(
          "slot order of ", slot_order.size(), " is not a permutation of ", keys->size(), " keys"));
    }
  }
  absl::StatusOr<SizeClassId> cls = allocator_->ClassFor(block_bytes);
  if (!cls.ok()) return cls.status();
  uint64_t slot_bytes = allocator_->SlotBytes(*cls);
  uint64_t capacity = allocator_->capacity_bytes();
  if (keys->size() * slot_bytes > capacity) {
    return absl::ResourceExhaustedError(absl::StrCat(keys->size(), " blocks of ", block_bytes,
                                                     " bytes exceed the pool of ", capacity));
  }
  MutexLock lock(&mu_);
  if (absl::Status st = CheckBlockBytesLocked(ns, block_bytes); !st.ok()) return st;
  policy_->SetCapacity(capacity / slot_bytes);
  ReserveResult result;
  result.slots.resize(keys->size());
  Reservation r;
  r.session = session;
  r.request_size = static_cast<uint32_t>(keys->size());
  size_t budget = options_.max_evictions_per_store;
  for (size_t k = 0; k < keys->size(); ++k) {
    const size_t i = slot_order.empty() ? k : slot_order[k];
    SlotRef slot;
    StoreStatus st = ReserveOneLocked((*keys)[i], *cls, !bypass_admission, &budget, &slot);
    result.slots[i].status = st;
    if (st != StoreStatus::kReserved) continue;
    result.slots[i].offset = slot.offset;
    result.slots[i].length = block_bytes;
    r.blocks.push_back(PendingBlock{static_cast<uint32_t>(i), (*keys)[i], slot});
  }
  if (!slot_order.empty()) {  // Published in key order (CommitStore walks r.blocks).
    std::sort(r.blocks.begin(), r.blocks.end(),
              [](const PendingBlock& a, const PendingBlock& b) { return a.index < b.index; });
  }
  if (!r.blocks.empty()) {
    r.expires = clock_->Now() + options_.reservation_ttl;
    result.reservation = next_id_++;
    reservations_.emplace(result.reservation, std::move(r));
    ++open_reservations_;
  }
  return result;
}

StoreStatus BlockCache::ReserveOneLocked(const BlockKey& key, SizeClassId cls, bool check_admission,
                                         size_t* budget, SlotRef* slot) {
  if (index_.Find(key).has_value()) return StoreStatus::kAlreadyPresent;
  if (check_admission && options_.admission_min_lookups > 0) {
    auto it = miss_counts_.find(key);
    if (it == miss_counts_.end() || it->second < options_.admission_min_lookups) {
      ++not_admitted_;
      return StoreStatus::kNotAdmitted;
    }
  }
  uint64_t id = key.Fingerprint();
  std::optional<SlotHandle> handle;
  // A fingerprint shared with another live key (~never) would confuse the policy: drop.
  if (!by_id_.contains(id)) handle = AllocateLocked(cls, budget);
  if (!handle.has_value()) {
    ++dropped_;
    return StoreStatus::kDropped;
  }
  *slot = handle->Release();
  BlockEntry entry;
  entry.offset = slot->offset;
  entry.size_class = cls;
  entry.flags = BlockEntry::kPending;
  index_.Insert(key, entry);
  by_id_.emplace(id, key);
  miss_counts_.erase(key);
  return StoreStatus::kReserved;
}

std::optional<SlotHandle> BlockCache::AllocateLocked(SizeClassId cls, size_t* budget) {
  const double capacity = static_cast<double>(allocator_->capacity_bytes());
  const double slot = static_cast<double>(allocator_->SlotBytes(cls));
  auto used = [this] { return static_cast<double>(allocator_->UsedBytes()); };
  if (used() + slot > options_.high_watermark * capacity) {
    while (used() + slot > options_.low_watermark * capacity && *budget > 0 && EvictOneLocked()) {
      --*budget;
    }
    if (used() + slot > options_.high_watermark * capacity) return std::nullopt;
  }
  for (;;) {
    std::optional<SlotHandle> handle = allocator_->Allocate(cls);
    if (handle.has_value()) return handle;
    // Room under the watermark but no slot of this class: free slots until one of ours
    // frees, or a slab of another class empties and moves to us.
    if (*budget == 0 || !EvictOneLocked()) return std::nullopt;
    --*budget;
  }
}

void BlockCache::PublishLocked(const BlockKey& key) {
  policy_->OnInsert(key.Fingerprint());
  ++blocks_;
  ++ns_blocks_[key.ns()];
  if (options_.listener != nullptr) options_.listener->OnStored(key.ns(), key, Tier::kL1);
}

void BlockCache::ReleasePendingLocked(const PendingBlock& block) {
  index_.Erase(block.key);
  by_id_.erase(block.key.Fingerprint());
  allocator_->Free(block.slot);
}

absl::StatusOr<BlockCache::Reservation*> BlockCache::OpenReservationLocked(SessionId session,
                                                                           ReservationId id) {
  auto it = reservations_.find(id);
  if (it == reservations_.end()) {
    return absl::NotFoundError(absl::StrCat("reservation ", id, " is unknown or expired"));
  }
  if (it->second.session != session) {
    return absl::FailedPreconditionError(
        absl::StrCat("reservation ", id, " belongs to another session"));
  }
  if (it->second.closed) {
    return absl::FailedPreconditionError(
        absl::StrCat("reservation ", id, " was already committed or aborted"));
  }
  return &it->second;
}

void BlockCache::CloseReservationLocked(Reservation& r) {
  r.closed = true;
  r.blocks.clear();
  r.blocks.shrink_to_fit();
  r.expires = clock_->Now() + options_.reservation_ttl;  // the tombstone's lifetime
  --open_reservations_;
}

absl::StatusOr<size_t> BlockCache::CommitStore(SessionId session, ReservationId id,
                                               std::optional<absl::Span<const uint32_t>> written,
                                               std::optional<LeaseRef> into) {
  MutexLock lock(&mu_);
  absl::StatusOr<Reservation*> r = OpenReservationLocked(session, id);
  if (!r.ok()) return r.status();
  std::vector<bool> keep((*r)->request_size, !written.has_value());
  if (written.has_value()) {
    for (uint32_t index : *written) {
      if (index >= keep.size()) {
        return absl::InvalidArgumentError(absl::StrCat("written index ", index, " is outside the ",
                                                       keep.size(), " reserved keys"));
      }
      keep[index] = true;
    }
  }
  std::vector<BlockKey> committed;
  for (const PendingBlock& block : (*r)->blocks) {
    if (keep[block.index]) {
      committed.push_back(block.key);
    } else {
      ReleasePendingLocked(block);
    }
  }
  // Visible at once, each index shard's lock taken once per 256 keys (not once per key).
  index_.UpdateEach(committed, [](size_t, BlockEntry& e) {
    e.flags &= static_cast<uint8_t>(~BlockEntry::kPending);
    e.tiers |= TierBit(Tier::kL1);
  });
  for (const BlockKey& key : committed) PublishLocked(key);
  CloseReservationLocked(**r);
  if (into.has_value() && !committed.empty() &&
      leases_.Extend(into->session, into->lease, committed)) {
    AddRefsLocked(committed, +1);
  }
  return committed.size();
}

absl::Status BlockCache::AbortStore(SessionId session, ReservationId id) {
  MutexLock lock(&mu_);
  absl::StatusOr<Reservation*> r = OpenReservationLocked(session, id);
  if (!r.ok()) return r.status();
  for (const PendingBlock& block : (*r)->blocks) ReleasePendingLocked(block);
  CloseReservationLocked(**r);
  return absl::OkStatus();
}

}  // namespace kvstrata
