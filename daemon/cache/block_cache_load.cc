// BlockCache load path and lifetimes: AcquireLoad, ReleaseLoad, ReleaseLease, EndSession,
// ReapExpired, ReleaseFenced.
#include <optional>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "daemon/cache/block_cache.h"

namespace kvstrata {

absl::StatusOr<LoadResult> BlockCache::AcquireLoad(SessionId session, NamespaceId ns, Keys raw,
                                                   std::optional<LeaseId> lease) {
  absl::StatusOr<std::vector<BlockKey>> keys = MakeBlockKeys(ns, raw, options_.max_keys_per_call);
  if (!keys.ok()) return keys.status();
  MutexLock lock(&mu_);
  std::optional<Lease> consumed;
  if (lease.has_value()) {
    absl::StatusOr<Lease> l = leases_.Consume(session, *lease);
    if (!l.ok()) return l.status();
    consumed = *std::move(l);
  }
  LoadResult result;
  result.slots.resize(keys->size());
  Load load;
  load.session = session;
  // Pinned for the load (in the same pass that finds them) before the lease's pins go, so
  // nothing is evictable in between.
  index_.UpdateEach(*keys, [&](size_t i, BlockEntry& e) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (!e.visible() || !(e.tiers & TierBit(Tier::kL1))) return;
    result.slots[i] = LoadSlot{LoadStatus::kReady, e.offset, BlockBytesLocked(ns, e)};
    ++e.refs;
  });
  for (size_t i = 0; i < keys->size(); ++i) {
    if (result.slots[i].status == LoadStatus::kReady) load.keys.push_back((*keys)[i]);
  }
  if (consumed.has_value()) AddRefsLocked(consumed->keys, -1);
  if (!load.keys.empty()) {
    result.load = next_id_++;
    loads_.emplace(result.load, std::move(load));
  }
  return result;
}

absl::Status BlockCache::ReleaseLoad(SessionId session, LoadId id) {
  MutexLock lock(&mu_);
  auto it = loads_.find(id);
  if (it == loads_.end()) {
    return absl::NotFoundError(absl::StrCat("load ", id, " is unknown or released"));
  }
  if (it->second.session != session) {
    return absl::FailedPreconditionError(absl::StrCat("load ", id, " belongs to another session"));
  }
  AddRefsLocked(it->second.keys, -1);
  loads_.erase(it);
  return absl::OkStatus();
}

absl::Status BlockCache::ReleaseLease(SessionId session, LeaseId id) {
  MutexLock lock(&mu_);
  absl::StatusOr<Lease> lease = leases_.Release(session, id);
  if (!lease.ok()) return lease.status();
  AddRefsLocked(lease->keys, -1);
  return absl::OkStatus();
}

SessionEndResult BlockCache::EndSession(SessionId session) {
  MutexLock lock(&mu_);
  SessionEndResult result;
  for (const Lease& lease : leases_.DropSession(session)) {
    AddRefsLocked(lease.keys, -1);
    ++result.leases;
  }
  result.reservations = DropReservationsLocked(
      [session](const Reservation& r) { return r.session == session; }, &result.fenced_slots);
  bool fence = MayWriteLocked(session);
  for (auto it = loads_.begin(); it != loads_.end();) {
    if (it->second.session != session) {
      ++it;
      continue;
    }
    if (fence) {  // The reader may still be copying: the blocks stay pinned.
      Fenced& held = fenced_[session];
      result.fenced_slots += it->second.keys.size();
      held.load_keys.insert(held.load_keys.end(), it->second.keys.begin(), it->second.keys.end());
      // Counted with the fenced slots, so that an operator sees them (issue 46).
      for (const BlockKey& key : it->second.keys) {
        if (std::optional<BlockEntry> e = index_.Find(key)) {
          uint64_t bytes = allocator_->SlotBytes(e->size_class);
          held.load_bytes += bytes;
          fenced_bytes_ += bytes;
        }
      }
    } else {
      AddRefsLocked(it->second.keys, -1);
    }
    ++result.loads;
    loads_.erase(it++);
  }
  return result;
}

bool BlockCache::MayWriteLocked(SessionId session) const {
  return options_.may_write && options_.may_write(session);
}

size_t BlockCache::DropReservationsLocked(absl::FunctionRef<bool(const Reservation&)> doomed,
                                          size_t* fenced) {
  size_t released = 0;
  for (auto it = reservations_.begin(); it != reservations_.end();) {
    if (!doomed(it->second)) {
      ++it;
      continue;
    }
    if (!it->second.closed) {  // Open: none of its blocks became visible.
      SessionId session = it->second.session;
      bool fence = !it->second.blocks.empty() && MayWriteLocked(session);
      for (const PendingBlock& block : it->second.blocks) {
        if (!fence) {
          ReleasePendingLocked(block);
          continue;
        }
        // The writer may still be copying into the slot: forget the key, keep the slot.
        index_.Erase(block.key);
        by_id_.erase(block.key.Fingerprint());
        fenced_[session].slots.push_back(block.slot);
        fenced_bytes_ += block.slot.length;
        ++*fenced;
      }
      --open_reservations_;
      ++released;
    }
    reservations_.erase(it++);
  }
  return released;
}

size_t BlockCache::ReleaseFenced(SessionId session) {
  MutexLock lock(&mu_);
  auto it = fenced_.find(session);
  if (it == fenced_.end()) return 0;
  for (const SlotRef& slot : it->second.slots) {
    allocator_->Free(slot);
    fenced_bytes_ -= slot.length;
  }
  AddRefsLocked(it->second.load_keys, -1);
  fenced_bytes_ -= it->second.load_bytes;
  size_t released = it->second.slots.size() + it->second.load_keys.size();
  fenced_.erase(it);
  return released;
}

ReapResult BlockCache::ReapExpired() {
  MutexLock lock(&mu_);
  ReapResult result;
  for (const Lease& lease : leases_.ReapExpired()) {
    AddRefsLocked(lease.keys, -1);
    ++result.leases;
  }
  absl::Time now = clock_->Now();
  result.reservations = DropReservationsLocked(
      [now](const Reservation& r) { return r.expires <= now; }, &result.fenced_slots);
  return result;
}

}  // namespace kvstrata
