// BlockCache: construction, lookup, shared helpers, admin operations and statistics.
// The store path is in block_cache_store.cc, loads and session ends in block_cache_load.cc.
#include "daemon/cache/block_cache.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace kvstrata {

absl::StatusOr<std::unique_ptr<BlockCache>> BlockCache::Create(SlabAllocator* allocator,
                                                               BlockCacheOptions options) {
  if (allocator == nullptr) return absl::InvalidArgumentError("no slab allocator");
  if (!(options.low_watermark > 0 && options.low_watermark <= options.high_watermark &&
        options.high_watermark <= 1)) {
    return absl::InvalidArgumentError("watermarks must satisfy 0 < low <= high <= 1");
  }
  absl::StatusOr<std::unique_ptr<EvictionPolicy>> policy =
      MakeEvictionPolicy(options.eviction_policy, 1024);
  if (!policy.ok()) return policy.status();
  return std::unique_ptr<BlockCache>(
      new BlockCache(allocator, std::move(options), *std::move(policy)));
}

BlockCache::BlockCache(SlabAllocator* allocator, BlockCacheOptions options,
                       std::unique_ptr<EvictionPolicy> policy)
    : allocator_(allocator),
      options_(std::move(options)),
      clock_(options_.clock != nullptr ? options_.clock : SystemClock::Get()),
      index_(options_.index_shards),
      leases_(clock_, options_.first_id),
      policy_(std::move(policy)),
      next_id_(options_.first_id) {}

BlockCache::~BlockCache() {
  // Give every slot back so that the allocator (which outlives us) is consistent.
  std::vector<std::pair<uint64_t, SizeClassId>> slots;
  index_.ForEach([&](const BlockKey&, const BlockEntry& e) {
    if (e.pending() || (e.tiers & TierBit(Tier::kL1))) slots.emplace_back(e.offset, e.size_class);
  });
  for (const auto& [offset, cls] : slots) {
    allocator_->Free(SlotRef{offset, allocator_->SlotBytes(cls), cls});
  }
  MutexLock lock(&mu_);
  for (const auto& [session, fenced] : fenced_) {
    for (const SlotRef& slot : fenced.slots) allocator_->Free(slot);
  }
}

absl::StatusOr<LookupResult> BlockCache::Lookup(SessionId session, NamespaceId ns, Keys raw,
                                                std::optional<absl::Duration> lease_ttl,
                                                bool past_miss) {
  if (lease_ttl.has_value()) {
    if (absl::Status st = CheckLeaseTtl(*lease_ttl); !st.ok()) return st;
  }
  absl::StatusOr<std::vector<BlockKey>> keys = MakeBlockKeys(ns, raw, options_.max_keys_per_call);
  if (!keys.ok()) return keys.status();
  LookupResult result;
  if (!lease_ttl.has_value()) {
    // Read-mostly path: the index is sharded and thread-safe.
    PrefixMatch match = index_.LongestPrefix(*keys);
    hits_.fetch_add(match.hits, std::memory_order_relaxed);
    misses_.fetch_add(keys->size() - match.hits, std::memory_order_relaxed);
    if (options_.admission_min_lookups > 0) {
      MutexLock lock(&mu_);  // Admission counts must not be lost.
      RecordLookupLocked(match, *keys);
    } else if (mu_.TryLock()) {
      RecordLookupLocked(match, *keys);
      mu_.Unlock();
    } else {
      skipped_touches_.fetch_add(1, std::memory_order_relaxed);
    }
    result.hits = match.hits;
    result.tiers = std::move(match.tiers);
    if (past_miss)
      result.in_l1_past_miss = Visible(absl::MakeConstSpan(*keys).subspan(result.hits));
    return result;
  }
  MutexLock lock(&mu_);
  PrefixMatch match = index_.LongestPrefix(*keys);
  hits_.fetch_add(match.hits, std::memory_order_relaxed);
  misses_.fetch_add(keys->size() - match.hits, std::memory_order_relaxed);
  RecordLookupLocked(match, *keys);
  absl::Span<const BlockKey> hit_keys = absl::MakeConstSpan(*keys).first(match.hits);
  result.hits = match.hits;
  result.tiers = std::move(match.tiers);
  if (match.hits > 0) {
    AddRefsLocked(hit_keys, +1);
    result.lease = leases_.Create(session, {hit_keys.begin(), hit_keys.end()}, *lease_ttl);
  }
  if (past_miss) result.in_l1_past_miss = Visible(absl::MakeConstSpan(*keys).subspan(result.hits));
  return result;
}

std::vector<bool> BlockCache::Visible(absl::Span<const BlockKey> keys) const {
  std::vector<bool> visible(keys.size(), false);
  for (size_t i = 0; i < keys.size(); ++i) {
    std::optional<BlockEntry> entry = index_.Find(keys[i]);
    visible[i] = entry.has_value() && entry->visible();
  }
  return visible;
}

void BlockCache::RecordLookupLocked(const PrefixMatch& match, absl::Span<const BlockKey> keys) {
  for (uint64_t id : match.fingerprints) policy_->OnAccess(id);
  CountMissesLocked(keys.subspan(match.hits));
}

absl::Status BlockCache::CheckLeaseTtl(absl::Duration ttl) const {
  if (ttl > absl::ZeroDuration() && ttl <= options_.max_lease_ttl) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("lease TTL must be in (0, ", absl::FormatDuration(options_.max_lease_ttl), "]"));
}

absl::StatusOr<LeaseId> BlockCache::CreateEmptyLease(SessionId session, absl::Duration ttl) {
  if (absl::Status st = CheckLeaseTtl(ttl); !st.ok()) return st;
  MutexLock lock(&mu_);
  return leases_.Create(session, {}, ttl);
}

size_t BlockCache::AddToLease(LeaseRef into, NamespaceId ns, Keys raw) {
  absl::StatusOr<std::vector<BlockKey>> keys = MakeBlockKeys(ns, raw, options_.max_keys_per_call);
  if (!keys.ok()) return 0;
  MutexLock lock(&mu_);
  std::vector<BlockKey> present;
  for (const BlockKey& key : *keys) {
    std::optional<BlockEntry> e = index_.Find(key);
    if (e.has_value() && e->visible() && (e->tiers & TierBit(Tier::kL1))) present.push_back(key);
  }
  if (present.empty() || !leases_.Extend(into.session, into.lease, present)) return 0;
  AddRefsLocked(present, +1);
  return present.size();
}

std::vector<BlockKey> BlockCache::VisibleKeys(std::optional<NamespaceId> ns) const {
  std::vector<BlockKey> keys;
  MutexLock lock(&mu_);
  index_.ForEach([&](const BlockKey& key, const BlockEntry& e) {
    if (e.visible() && (e.tiers & TierBit(Tier::kL1)) && (!ns.has_value() || key.ns() == *ns)) {
      keys.push_back(key);
    }
  });
  return keys;
}

absl::StatusOr<std::vector<std::optional<Tier>>> BlockCache::Peek(NamespaceId ns, Keys raw) const {
  absl::StatusOr<std::vector<BlockKey>> keys = MakeBlockKeys(ns, raw, options_.max_keys_per_call);
  if (!keys.ok()) return keys.status();
  std::vector<std::optional<Tier>> where;
  where.reserve(keys->size());
  for (const BlockKey& key : *keys) {
    std::optional<BlockEntry> entry = index_.Find(key);
    bool visible = entry.has_value() && entry->visible();
    where.push_back(visible ? std::optional<Tier>(FastestTier(entry->tiers)) : std::nullopt);
  }
  return where;
}

void BlockCache::CountMissesLocked(absl::Span<const BlockKey> missed) {
  if (options_.admission_min_lookups == 0) return;
  if (miss_counts_.size() + missed.size() > options_.admission_max_tracked) {
    miss_counts_.clear();
  }
  for (const BlockKey& key : missed) ++miss_counts_[key];
}

absl::Status BlockCache::CheckBlockBytesLocked(NamespaceId ns, uint64_t block_bytes) {
  if (block_bytes == 0) return absl::InvalidArgumentError("block size is 0");
  auto [it, inserted] = ns_block_bytes_.try_emplace(ns, block_bytes);
  if (!inserted && it->second != block_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("namespace ", ns, " stores blocks of ",
                                                   it->second, " bytes, not ", block_bytes));
  }
  return absl::OkStatus();
}

uint64_t BlockCache::BlockBytesLocked(NamespaceId ns, const BlockEntry& e) const {
  auto it = ns_block_bytes_.find(ns);
  return it != ns_block_bytes_.end() ? it->second : allocator_->SlotBytes(e.size_class);
}

void BlockCache::AddRefsLocked(absl::Span<const BlockKey> keys, int delta) {
  index_.UpdateEach(keys, [delta](size_t, BlockEntry& e) { e.refs += delta; });
}

bool BlockCache::EvictableLocked(EvictionPolicy::Id id) {
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return false;
  std::optional<BlockEntry> e = index_.Find(it->second);
  return e.has_value() && e->visible() && e->refs == 0 && !e->pinned();
}

bool BlockCache::EvictOneLocked() {
  std::optional<EvictionPolicy::Id> victim = policy_->PickVictim(
      [this](EvictionPolicy::Id id) ABSL_NO_THREAD_SAFETY_ANALYSIS { return EvictableLocked(id); });
  if (!victim.has_value()) return false;
  BlockKey key = by_id_.at(*victim);
  std::optional<BlockEntry> entry = index_.Find(key);
  if (options_.listener != nullptr) {
    options_.listener->OnEvicting(key.ns(), key, entry->offset, BlockBytesLocked(key.ns(), *entry));
  }
  RemoveBlockLocked(key, *entry, RemovalCause::kEvicted);
  ++evictions_;
  return true;
}

void BlockCache::RemoveBlockLocked(const BlockKey& key, const BlockEntry& entry,
                                   RemovalCause cause) {
  index_.Erase(key);
  allocator_->Free(
      SlotRef{entry.offset, allocator_->SlotBytes(entry.size_class), entry.size_class});
  uint64_t id = key.Fingerprint();
  by_id_.erase(id);
  policy_->OnErase(id);
  --blocks_;
  if (--ns_blocks_[key.ns()] == 0) ns_blocks_.erase(key.ns());
  if (options_.listener != nullptr) {
    options_.listener->OnRemoved(key.ns(), key, Tier::kL1, cause);
  }
}

absl::StatusOr<size_t> BlockCache::Evict(NamespaceId ns, Keys raw, std::vector<bool>* marks) {
  absl::StatusOr<std::vector<BlockKey>> keys = MakeBlockKeys(ns, raw, options_.max_keys_per_call);
  if (!keys.ok()) return keys.status();
  MutexLock lock(&mu_);
  size_t evicted = 0;
  for (size_t i = 0; i < keys->size(); ++i) {
    const BlockKey& key = (*keys)[i];
    std::optional<BlockEntry> e = index_.Find(key);
    if (!e.has_value() || !e->visible() || e->refs > 0 || e->pinned()) continue;
    RemoveBlockLocked(key, *e, RemovalCause::kAdminEvict);
    ++evicted;
    if (marks != nullptr) (*marks)[i] = true;
  }
  return evicted;
}

absl::StatusOr<std::vector<bool>> BlockCache::Pinned(NamespaceId ns, Keys raw) const {
  absl::StatusOr<std::vector<BlockKey>> keys = MakeBlockKeys(ns, raw, options_.max_keys_per_call);
  if (!keys.ok()) return keys.status();
  std::vector<bool> pinned;
  pinned.reserve(keys->size());
  for (const BlockKey& key : *keys) {
    std::optional<BlockEntry> e = index_.Find(key);
    pinned.push_back(e.has_value() && e->visible() && e->pinned());
  }
  return pinned;
}

size_t BlockCache::Clear(std::optional<NamespaceId> ns) {
  MutexLock lock(&mu_);
  std::vector<std::pair<BlockKey, BlockEntry>> doomed;
  index_.ForEach([&](const BlockKey& key, const BlockEntry& e) {
    if (e.visible() && e.refs == 0 && (!ns.has_value() || key.ns() == *ns)) {
      doomed.emplace_back(key, e);
    }
  });
  for (const auto& [key, e] : doomed) RemoveBlockLocked(key, e, RemovalCause::kCleared);
  return doomed.size();
}

absl::StatusOr<size_t> BlockCache::Pin(NamespaceId ns, Keys raw) {
  return SetPinned(ns, raw, /*pinned=*/true);
}

absl::StatusOr<size_t> BlockCache::Unpin(NamespaceId ns, Keys raw) {
  return SetPinned(ns, raw, /*pinned=*/false);
}

absl::StatusOr<size_t> BlockCache::SetPinned(NamespaceId ns, Keys raw, bool pinned) {
  absl::StatusOr<std::vector<BlockKey>> keys = MakeBlockKeys(ns, raw, options_.max_keys_per_call);
  if (!keys.ok()) return keys.status();
  MutexLock lock(&mu_);
  size_t changed = 0;
  for (const BlockKey& key : *keys) {
    index_.Update(key, [&](BlockEntry& e) {
      if (!e.visible() || e.pinned() == pinned) return;
      e.flags = pinned ? (e.flags | BlockEntry::kPinned) : (e.flags & ~BlockEntry::kPinned);
      ++changed;
    });
  }
  return changed;
}

CacheStats BlockCache::Stats() const {
  SlabAllocatorStats pool = allocator_->Stats();
  MutexLock lock(&mu_);
  CacheStats st;
  st.capacity_bytes = pool.capacity_bytes;
  st.used_bytes = pool.used_bytes;
  st.slab_moves = pool.slab_moves;
  st.blocks = blocks_;
  st.hits = hits_.load(std::memory_order_relaxed);
  st.misses = misses_.load(std::memory_order_relaxed);
  st.evictions = evictions_;
  st.dropped_stores = dropped_;
  st.not_admitted = not_admitted_;
  st.active_leases = leases_.Size();
  st.active_reservations = open_reservations_;
  st.active_loads = loads_.size();
  st.fenced_bytes = fenced_bytes_;
  st.blocks_per_namespace = ns_blocks_;
  return st;
}

}  // namespace kvstrata
