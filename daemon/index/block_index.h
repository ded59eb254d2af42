// BlockIndex: a sharded concurrent map BlockKey -> BlockEntry, and the longest-prefix
// lookup over a chain of keys ("how many leading blocks are present, and where").
//
// Thread safety: every method is thread-safe. Each shard has its own mutex; a method
// holds at most one shard lock at a time, so LongestPrefix over several shards is not an
// atomic snapshot (callers that need one serialise with their own lock, as BlockCache does).
// Memory: ~16 bytes of entry + 40 bytes of key per slot of an absl::flat_hash_map.
#ifndef KVSTRATA_DAEMON_INDEX_BLOCK_INDEX_H_
#define KVSTRATA_DAEMON_INDEX_BLOCK_INDEX_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/hash/hash.h"
#include "absl/types/span.h"
#include "daemon/common/mutex.h"
#include "daemon/index/block_entry.h"
#include "daemon/index/block_key.h"

namespace kvstrata {

struct PrefixMatch {
  size_t hits = 0;                     // number of leading keys present (visible entries only)
  std::vector<Tier> tiers;             // fastest tier of each hit; tiers.size() == hits
  std::vector<uint64_t> fingerprints;  // BlockKey::Fingerprint() of each hit
};

class BlockIndex {
 public:
  // `shard_count` is rounded up to a power of two (at least 1).
  explicit BlockIndex(size_t shard_count = 64);

  BlockIndex(const BlockIndex&) = delete;
  BlockIndex& operator=(const BlockIndex&) = delete;

  // Inserts `entry` if `key` is absent. Returns false (and changes nothing) if present.
  bool Insert(const BlockKey& key, const BlockEntry& entry);
  // A copy of the entry, or nullopt on a miss (pending entries included).
  std::optional<BlockEntry> Find(const BlockKey& key) const;
  // Removes `key`; returns the removed entry, or nullopt if absent.
  std::optional<BlockEntry> Erase(const BlockKey& key);
  // Runs `fn` on the entry under the shard lock; false if absent. `fn` must not call
  // back into the index.
  bool Update(const BlockKey& key, const std::function<void(BlockEntry&)>& fn);
  // Runs `fn(i, entry)` for each keys[i] present, in no particular order, under its shard's
  // lock, which it takes once per shard for up to 256 keys (not once per key: a job's
  // 512 blocks pin in one pass). `fn` must not call back into the index.
  void UpdateEach(absl::Span<const BlockKey> keys, absl::FunctionRef<void(size_t, BlockEntry&)> fn);

  // Leading visible keys of `chain`; stops at the first miss or pending entry. Long chains
  // are looked up in chunks, each taking every shard lock once (not once per key), so a
  // few keys after the first miss may be probed.
  PrefixMatch LongestPrefix(absl::Span<const BlockKey> chain) const;

  // Calls `fn` for every entry, one shard at a time under its lock. `fn` must not call
  // back into the index.
  void ForEach(const std::function<void(const BlockKey&, const BlockEntry&)>& fn) const;

  size_t Size() const;
  // Capacity reservation spread over the shards (avoids rehash spikes when loading).
  void Reserve(size_t entries);

 private:
  // Hashes a key from its fingerprint, so that a fingerprint computed once (it also picks
  // the shard) serves the map probe too: find(key, KeyHash::Of(fingerprint)).
  struct KeyHash {
    static size_t Of(uint64_t fingerprint) { return absl::Hash<uint64_t>{}(fingerprint); }
    size_t operator()(const BlockKey& key) const { return Of(key.Fingerprint()); }
  };
  struct Shard {
    mutable Mutex mu;
    absl::flat_hash_map<BlockKey, BlockEntry, KeyHash> map ABSL_GUARDED_BY(mu);
  };

  Shard& ShardOf(uint64_t fingerprint) const {
    // High bits choose the shard; the map uses its own mix of the hash for buckets.
    return shards_[(fingerprint >> 40) & shard_mask_];
  }
  // One chunk of LongestPrefix: appends the chunk's leading hits; false at a miss.
  bool PrefixChunk(absl::Span<const BlockKey> chunk, PrefixMatch& match) const;
  // Calls fn(shard map, its find() of chunk[i] (end() when absent), i) for each chunk[i]
  // (at most 256 keys; `fps` receives their fingerprints), shard by shard, under
  // each shard's lock, taken once.
  template <typename Fn>
  void ChunkByShard(absl::Span<const BlockKey> chunk, uint64_t* fps, Fn&& fn) const;

  std::unique_ptr<Shard[]> shards_;
  size_t shard_mask_;
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_INDEX_BLOCK_INDEX_H_
