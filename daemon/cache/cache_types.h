// Options, results and statistics of BlockCache (plain value types).
#ifndef KVSTRATA_DAEMON_CACHE_CACHE_TYPES_H_
#define KVSTRATA_DAEMON_CACHE_CACHE_TYPES_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "daemon/cache/tier_listener.h"
#include "daemon/index/block_entry.h"
#include "daemon/lease/lease_table.h"

namespace kvstrata {

using ReservationId = uint64_t;  // 0: no reservation was made
using LoadId = uint64_t;         // 0: nothing was pinned for a load

struct BlockCacheOptions {
  std::string eviction_policy = "lru";  // "lru", "arc" or "s3fifo"
  // Above high * capacity, evict down to low * capacity; a store that cannot get under
  // high is dropped.
  double high_watermark = 0.95;
  double low_watermark = 0.85;
  // Store a key only after it was looked up (and missed) this many times; 0 = always.
  uint32_t admission_min_lookups = 0;
  size_t admission_max_tracked = 1 << 20;  // the miss counters are reset beyond this
  absl::Duration reservation_ttl = absl::Seconds(60);
  absl::Duration max_lease_ttl = absl::Minutes(5);
  size_t max_keys_per_call = 1 << 16;
  size_t max_evictions_per_store = 4096;  // bound on the work of one ReserveStore
  size_t index_shards = 64;
  Clock* clock = nullptr;            // not owned; nullptr = SystemClock
  TierListener* listener = nullptr;  // not owned; may be nullptr
  // True while a process that `session` handed the shared region to may still run (see
  // daemon/session/process_fence.h). Such a session's reserved and loading slots are not
  // freed when it ends or its reservation expires: they stay fenced until ReleaseFenced.
  // Empty = no session is ever fenced. Called with the cache's mutex held; must not block.
  std::function<bool(SessionId)> may_write;
  // Reservation, load and lease ids count up from here (a partitioned L1 gives each
  // partition its own range, so an id names its partition: see PartitionedCache).
  uint64_t first_id = 1;
};

// A lease and its owner.
struct LeaseRef {
  SessionId session = 0;
  LeaseId lease = 0;
};

struct LookupResult {
  size_t hits = 0;               // leading keys present
  std::vector<Tier> tiers;       // fastest tier of each hit
  std::optional<LeaseId> lease;  // set when a lease was asked for and hits > 0
  // Asked for with `past_miss`: for each key after the hits, whether L1 holds it (the
  // lower tiers' lookup goes on from there without asking L1 again).
  std::vector<bool> in_l1_past_miss;
};

enum class StoreStatus {
  kReserved,        // write the block at offset/length, then CommitStore
  kAlreadyPresent,  // present, being stored by someone, or repeated in this request
  kDropped,         // no room under the watermarks (counted in dropped_stores)
  kNotAdmitted,     // looked up fewer than admission_min_lookups times
};

struct StoreSlot {
  StoreStatus status = StoreStatus::kDropped;
  uint64_t offset = 0;  // valid for kReserved
  uint64_t length = 0;  // block bytes; valid for kReserved
};

struct ReserveResult {
  ReservationId reservation = 0;  // 0 when no key was reserved
  std::vector<StoreSlot> slots;   // one per requested key, in order
};

enum class LoadStatus { kReady, kMissing };

struct LoadSlot {
  LoadStatus status = LoadStatus::kMissing;
  uint64_t offset = 0;  // valid for kReady
  uint64_t length = 0;  // valid for kReady
};

struct LoadResult {
  LoadId load = 0;              // 0 when no key was ready (nothing to release)
  std::vector<LoadSlot> slots;  // one per requested key, in order
};

struct SessionEndResult {
  size_t leases = 0, reservations = 0, loads = 0;
  size_t fenced_slots = 0;  // kept from the pool: the session's process may still touch them

  SessionEndResult& operator+=(const SessionEndResult& o) {
    leases += o.leases;
    reservations += o.reservations;
    loads += o.loads;
    fenced_slots += o.fenced_slots;
    return *this;
  }
};

struct ReapResult {
  size_t leases = 0, reservations = 0;
  size_t fenced_slots = 0;  // of expired reservations whose process may still write them

  ReapResult& operator+=(const ReapResult& o) {
    leases += o.leases;
    reservations += o.reservations;
    fenced_slots += o.fenced_slots;
    return *this;
  }
};

struct CacheStats {
  uint64_t capacity_bytes = 0;
  uint64_t used_bytes = 0;  // slots held by visible blocks and open reservations
  uint64_t blocks = 0;      // visible blocks
  uint64_t hits = 0;        // blocks found by Lookup
  uint64_t misses = 0;      // blocks asked for by Lookup and not found
  uint64_t evictions = 0;
  uint64_t dropped_stores = 0;
  uint64_t not_admitted = 0;
  uint64_t slab_moves = 0;
  uint64_t active_leases = 0, active_reservations = 0, active_loads = 0;
  // Slots held for ended sessions whose process may still touch them: reserved slots it
  // may still write, and the blocks of its loads, pinned while it may still read them.
  uint64_t fenced_bytes = 0;
  absl::flat_hash_map<NamespaceId, uint64_t> blocks_per_namespace;

  // Adds another cache's figures (the partitions of one L1).
  CacheStats& operator+=(const CacheStats& o) {
    for (uint64_t CacheStats::*f :
         {&CacheStats::capacity_bytes, &CacheStats::used_bytes, &CacheStats::blocks,
          &CacheStats::hits, &CacheStats::misses, &CacheStats::evictions,
          &CacheStats::dropped_stores, &CacheStats::not_admitted, &CacheStats::slab_moves,
          &CacheStats::active_leases, &CacheStats::active_reservations, &CacheStats::active_loads,
          &CacheStats::fenced_bytes}) {
      this->*f += o.*f;
    }
    for (const auto& [ns, blocks] : o.blocks_per_namespace) blocks_per_namespace[ns] += blocks;
    return *this;
  }
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_CACHE_CACHE_TYPES_H_
