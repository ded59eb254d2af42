// TierStack: what the tiering pieces (WriteDown, Promoter, LowerLookup) share: the daemon's
// tier table (common/tier_table.h: every tier's id, label, kind, medium, locality); the tiers
// below L1, fastest first, each with its options and its I/O threads; L1 (the partitioned
// cache and the shared region its offsets point into); the namespaces as the tiers name
// them. Copy metrics (bytes and latency of each block moved between L1 and a lower tier) are
// the tiers' own (BlockTier's front): SetMetrics hands the sink to every lower tier.
// Set up (AddTier, AttachL1, SetMetrics) before serving; after that thread-safe. Stop()
// stops every tier's I/O threads (queued tasks are dropped), then each tier's own
// background threads (BlockTier::Stop), and is final: once it returned, no thread of the
// stack or its tiers calls back (observer notices, metrics).
#ifndef KVSTRATA_DAEMON_TIERING_TIER_STACK_H_
#define KVSTRATA_DAEMON_TIERING_TIER_STACK_H_

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "daemon/cache/partitioned_cache.h"
#include "daemon/common/ids.h"
#include "daemon/common/mutex.h"
#include "daemon/common/tier.h"
#include "daemon/common/tier_table.h"
#include "daemon/metrics/metrics_sink.h"
#include "daemon/namespaces/namespace_registry.h"
#include "daemon/tiers/block_tier.h"
#include "daemon/tiers/io_pool.h"

namespace kvstrata {

struct LowerTierOptions {
  bool write_back = false;
  uint32_t write_down_min_hits = 0;  // L1 hits before a block is written down; 0 = on store
  size_t io_threads = 4;
  size_t write_queue_blocks = 1024;
  // Write-through: a block stored while the write queue is full waits for its first L1 hit
  // to be queued (ahead of the backlog, taking the place of a block not reused if still
  // full; shed if it leaves L1 first); false: a full queue drops it (backlog_policy
  // "defer" / "drop").
  bool defer_when_full = true;
  absl::Duration probe_timeout = absl::Milliseconds(5);
  // A shared tier's entry not seen within its presence_ttl (kStale): checked within the
  // lookup (up to probe_timeout; a removed file is then never a hit), or, by default,
  // counted as the index says and checked after the lookup answered, so that the next
  // lookup knows (the lookup costs no I/O for it).
  bool presence_check_sync = false;
  // The bytes of L1 blocks this tier keeps copied for writes that had not run when L1
  // evicted the block (write-through) or that L1's eviction queued (write-back), at most.
  // The copy is made under L1's lock, in the path of the engine's stores: past this an
  // evicted block's write is shed (write-through) or dropped (write-back), counted, so a
  // disk slower than the stores never makes L1's evictions copy everything they evict.
  uint64_t evicted_copy_bytes = uint64_t{256} << 20;
};

// One tier below L1.
struct LowerTier {
  std::unique_ptr<BlockTier> storage;
  LowerTierOptions options;
  std::unique_ptr<IoPool> io;  // its reads (urgent) and writes (background)
  // Kept by WriteDown (writes queued now, writes dropped by a full queue, blocks waiting for
  // their first hit now, blocks that left L1 while waiting, writes not queued because the
  // tier's index held the block) and Promoter (promotion tasks started, blocks promoted
  // into L1).
  std::atomic<uint64_t> queued{0}, dropped{0}, deferred{0}, shed{0}, present{0}, promotions{0},
      promoted{0};
  Tier level() const { return storage->level(); }
};

class TierStack {
 public:
  // `table`: the daemon's tiers (L1 and every configured one, opened or not); a tier added
  // below names its row by level().
  TierStack(NamespaceRegistry* namespaces, TierTable table)
      : namespaces_(namespaces), table_(std::move(table)) {}
  TierStack(const TierStack&) = delete;
  TierStack& operator=(const TierStack&) = delete;
  // Stop() joins every thread that can call back into the tiering pieces (the I/O pools,
  // and the tiers' own background threads: L3's trim reports removals through
  // TierManager::OnLowerTierChange, which uses the namespace maps below), so nothing runs
  // while the members are destroyed.
  ~TierStack() { Stop(); }

  // Set-up: lower tiers fastest first, then L1.
  void AddTier(std::unique_ptr<BlockTier> storage, LowerTierOptions options);
  void AttachL1(PartitionedCache* cache, char* region_base) {
    l1_ = cache;
    region_ = region_base;
  }
  // Every lower tier's, added before or after this (BlockTier::SetMetrics).
  void SetMetrics(MetricsSink* metrics);
  void Stop();
  bool stopped() const { return stopped_.load(); }

  const std::vector<std::unique_ptr<LowerTier>>& tiers() const { return tiers_; }
  const TierTable& table() const { return table_; }
  LowerTier* TierOf(Tier tier) const;
  // L1; nullptr until AttachL1.
  PartitionedCache* l1() const { return l1_; }
  // The L1 bytes at `offset` (an offset of a slot the cache gave out).
  char* region(uint64_t offset) const { return region_ + offset; }

  // The namespace as the tiers name it (fingerprint, spec, payload size); nullopt when
  // it is not registered. Cached.
  std::optional<TierNamespace> NamespaceOf(NamespaceId ns);

  // The fastest lower tier whose index holds `key`, without I/O; nullopt = none does,
  // and then `unknown` is set when a probe of some tier could tell more. A shared tier's
  // entry not seen lately (kStale) counts only with `trust_stale` (a load, whose read is
  // the check; a lookup whose probe did not answer in time); else it is unknown.
  std::optional<Tier> Where(const TierNamespace& tn, absl::string_view key, bool* unknown,
                            bool trust_stale = false) const;

 private:
  NamespaceRegistry* const namespaces_;
  const TierTable table_;
  std::vector<std::unique_ptr<LowerTier>> tiers_;  // fastest first
  PartitionedCache* l1_ = nullptr;
  char* region_ = nullptr;
  MetricsSink* metrics_ = nullptr;
  std::atomic<bool> stopped_{false};

  Mutex ns_mu_;
  absl::flat_hash_map<NamespaceId, TierNamespace> ns_cache_ ABSL_GUARDED_BY(ns_mu_);
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_TIERING_TIER_STACK_H_
