#include "daemon/index/block_index.h"

#include <bit>

namespace kvstrata {

BlockIndex::BlockIndex(size_t shard_count) {
  size_t n = std::bit_ceil(shard_count == 0 ? size_t{1} : shard_count);
  shards_ = std::make_unique<Shard[]>(n);
  shard_mask_ = n - 1;
}

BlockIndex::Shard& BlockIndex::ShardFor(const BlockKey& key) const {
  // High bits choose the shard; the map uses its own mix of the hash for buckets.
  return shards_[(key.Fingerprint() >> 40) & shard_mask_];
}

bool BlockIndex::Insert(const BlockKey& key, const BlockEntry& entry) {
  Shard& s = ShardFor(key);
  MutexLock lock(&s.mu);
  return s.map.try_emplace(key, entry).second;
}

std::optional<BlockEntry> BlockIndex::Find(const BlockKey& key) const {
  Shard& s = ShardFor(key);
  MutexLock lock(&s.mu);
  auto it = s.map.find(key);
  if (it == s.map.end()) return std::nullopt;
  return it->second;
}

std::optional<BlockEntry> BlockIndex::Erase(const BlockKey& key) {
  Shard& s = ShardFor(key);
  MutexLock lock(&s.mu);
  auto it = s.map.find(key);
  if (it == s.map.end()) return std::nullopt;
  BlockEntry entry = it->second;
  s.map.erase(it);
  return entry;
}

bool BlockIndex::Update(const BlockKey& key,
                        const std::function<void(BlockEntry&)>& fn) {
  Shard& s = ShardFor(key);
  MutexLock lock(&s.mu);
  auto it = s.map.find(key);
  if (it == s.map.end()) return false;
  fn(it->second);
  return true;
}

PrefixMatch BlockIndex::LongestPrefix(absl::Span<const BlockKey> chain) const {
  PrefixMatch match;
  for (const BlockKey& key : chain) {
    std::optional<BlockEntry> entry = Find(key);
    if (!entry.has_value() || !entry->visible()) break;
    match.tiers.push_back(FastestTier(entry->tiers));
    ++match.hits;
  }
  return match;
}

void BlockIndex::ForEach(
    const std::function<void(const BlockKey&, const BlockEntry&)>& fn) const {
  for (size_t i = 0; i <= shard_mask_; ++i) {
    MutexLock lock(&shards_[i].mu);
    for (const auto& [key, entry] : shards_[i].map) fn(key, entry);
  }
}

size_t BlockIndex::Size() const {
  size_t total = 0;
  for (size_t i = 0; i <= shard_mask_; ++i) {
    MutexLock lock(&shards_[i].mu);
    total += shards_[i].map.size();
  }
  return total;
}

void BlockIndex::Reserve(size_t entries) {
  size_t per_shard = entries / (shard_mask_ + 1) + 1;
  for (size_t i = 0; i <= shard_mask_; ++i) {
    MutexLock lock(&shards_[i].mu);
    shards_[i].map.reserve(per_shard);
  }
}

}  // namespace kvstrata
