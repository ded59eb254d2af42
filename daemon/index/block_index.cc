#include "daemon/index/block_index.h"

#include <algorithm>
#include <bit>

namespace kvstrata {
namespace {

// Chains up to this long are probed key by key; longer ones shard by shard, in chunks of
// kPrefixChunk keys (a miss early in a long chain wastes at most one chunk of probes).
constexpr size_t kSequentialPrefix = 16;
constexpr size_t kPrefixChunk = 256;

}  // namespace

BlockIndex::BlockIndex(size_t shard_count) {
  size_t n = std::bit_ceil(shard_count == 0 ? size_t{1} : shard_count);
  shards_ = std::make_unique<Shard[]>(n);
  shard_mask_ = n - 1;
}

bool BlockIndex::Insert(const BlockKey& key, const BlockEntry& entry) {
  Shard& s = ShardOf(key.Fingerprint());
  MutexLock lock(&s.mu);
  return s.map.try_emplace(key, entry).second;
}

std::optional<BlockEntry> BlockIndex::Find(const BlockKey& key) const {
  uint64_t fp = key.Fingerprint();
  Shard& s = ShardOf(fp);
  MutexLock lock(&s.mu);
  auto it = s.map.find(key, KeyHash::Of(fp));
  if (it == s.map.end()) return std::nullopt;
  return it->second;
}

std::optional<BlockEntry> BlockIndex::Erase(const BlockKey& key) {
  uint64_t fp = key.Fingerprint();
  Shard& s = ShardOf(fp);
  MutexLock lock(&s.mu);
  auto it = s.map.find(key, KeyHash::Of(fp));
  if (it == s.map.end()) return std::nullopt;
  BlockEntry entry = it->second;
  s.map.erase(it);
  return entry;
}

bool BlockIndex::Update(const BlockKey& key, const std::function<void(BlockEntry&)>& fn) {
  uint64_t fp = key.Fingerprint();
  Shard& s = ShardOf(fp);
  MutexLock lock(&s.mu);
  auto it = s.map.find(key, KeyHash::Of(fp));
  if (it == s.map.end()) return false;
  fn(it->second);
  return true;
}

PrefixMatch BlockIndex::LongestPrefix(absl::Span<const BlockKey> chain) const {
  PrefixMatch match;
  match.tiers.reserve(chain.size());
  match.fingerprints.reserve(chain.size());
  if (chain.size() <= kSequentialPrefix) {
    for (const BlockKey& key : chain) {
      uint64_t fp = key.Fingerprint();
      Shard& s = ShardOf(fp);
      MutexLock lock(&s.mu);
      auto it = s.map.find(key, KeyHash::Of(fp));
      if (it == s.map.end() || !it->second.visible()) break;
      match.tiers.push_back(FastestTier(it->second.tiers));
      match.fingerprints.push_back(fp);
      ++match.hits;
    }
    return match;
  }
  for (size_t first = 0; first < chain.size(); first += kPrefixChunk) {
    size_t n = std::min(kPrefixChunk, chain.size() - first);
    if (!PrefixChunk(chain.subspan(first, n), match)) break;
  }
  return match;
}

template <typename Fn>
void BlockIndex::ChunkByShard(absl::Span<const BlockKey> chunk, uint64_t* fps, Fn&& fn) const {
  const size_t n = chunk.size();
  const size_t shards = shard_mask_ + 1;
  uint16_t order[kPrefixChunk];
  std::vector<uint32_t> start(shards + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    fps[i] = chunk[i].Fingerprint();
    ++start[((fps[i] >> 40) & shard_mask_) + 1];
  }
  for (size_t s = 0; s < shards; ++s) start[s + 1] += start[s];
  std::vector<uint32_t> fill(start.begin(), start.end() - 1);
  for (size_t i = 0; i < n; ++i)
    order[fill[(fps[i] >> 40) & shard_mask_]++] = static_cast<uint16_t>(i);
  for (size_t s = 0; s < shards; ++s) {
    if (start[s] == start[s + 1]) continue;
    Shard& shard = shards_[s];
    MutexLock lock(&shard.mu);
    for (uint32_t j = start[s]; j < start[s + 1]; ++j) {
      size_t i = order[j];
      fn(shard.map, shard.map.find(chunk[i], KeyHash::Of(fps[i])), i);
    }
  }
}

void BlockIndex::UpdateEach(absl::Span<const BlockKey> keys,
                            absl::FunctionRef<void(size_t, BlockEntry&)> fn) {
  uint64_t fps[kPrefixChunk];
  for (size_t first = 0; first < keys.size(); first += kPrefixChunk) {
    size_t n = std::min(kPrefixChunk, keys.size() - first);
    ChunkByShard(keys.subspan(first, n), fps, [&](auto& map, auto it, size_t i) {
      if (it != map.end()) fn(first + i, it->second);
    });
  }
}

bool BlockIndex::PrefixChunk(absl::Span<const BlockKey> chunk, PrefixMatch& match) const {
  const size_t n = chunk.size();
  uint64_t fps[kPrefixChunk];
  uint8_t tiers[kPrefixChunk];  // 0: missing or pending
  ChunkByShard(chunk, fps, [&](const auto& map, auto it, size_t i) {
    tiers[i] = it == map.end() || !it->second.visible() ? 0 : it->second.tiers;
  });
  for (size_t i = 0; i < n; ++i) {
    if (tiers[i] == 0) return false;
    match.tiers.push_back(FastestTier(tiers[i]));
    match.fingerprints.push_back(fps[i]);
    ++match.hits;
  }
  return true;
}

void BlockIndex::ForEach(const std::function<void(const BlockKey&, const BlockEntry&)>& fn) const {
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
