// TierManager: moves blocks between L1 (BlockCache over the shared region) and the file
// tiers below it (L2 local directory, L3 shared filesystem).
//
// - Down: with write-through a block committed to L1 is queued for each lower tier (or once
//   it has had `write_down_min_hits` L1 hits); with write-back it is copied when L1 evicts
//   it. Writes run on the tier's IoPool behind reads; a full queue drops the write (counted),
//   never the engine's store. Drain writes every L1 block that a tier lacks.
// - Up: a lookup that leaves L1 early continues in the lower tiers (index, then file probes
//   that may take at most `probe_timeout`), reports each block's tier, and when it asked for
//   a lease starts promoting those blocks into L1; they join its lease as they land. A load
//   first waits (at most `promotion_wait`) for the promotions of the blocks it wants.
//   Blocks that do not make it are simply not loaded: the engine recomputes them.
// Thread-safe. Listener calls arrive with BlockCache's lock held and only queue work.
// Lock order: BlockCache, then TierManager's locks, then the tiers', then IoPool's.
#ifndef KVSTRATA_DAEMON_TIERING_TIER_MANAGER_H_
#define KVSTRATA_DAEMON_TIERING_TIER_MANAGER_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "daemon/cache/partitioned_cache.h"
#include "daemon/cache/tier_listener.h"
#include "daemon/common/mutex.h"
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
  absl::Duration probe_timeout = absl::Milliseconds(5);
};

struct LowerTierStatus {
  Tier tier = Tier::kL2;
  TierStats stats;
  uint64_t queued_writes = 0, dropped_writes = 0;
  uint64_t promotions = 0, promoted_blocks = 0;
  bool write_back = false;
};

class TierManager : public TierListener {
 public:
  TierManager(NamespaceRegistry* namespaces, absl::Duration promotion_wait);
  TierManager(const TierManager&) = delete;
  TierManager& operator=(const TierManager&) = delete;
  ~TierManager() override;

  // Set up before serving, in this order: tiers (fastest first), then L1. Any BlockTier
  // whose level() is L2 or L3 (a FileTier today).
  void AddTier(std::unique_ptr<BlockTier> storage, LowerTierOptions options);
  void AttachL1(PartitionedCache* cache, char* region_base);
  // Stops all file I/O (queued writes are dropped). Call before the L1 pool goes.
  void Stop();
  // Where L1 events go on to (metrics, KV events); may be nullptr.
  void SetNextListener(TierListener* next) { next_ = next; }
  // Receives the bytes and latency of every L1<->L2/L3 copy and the dropped writes.
  void SetMetrics(MetricsSink* metrics) { metrics_ = metrics; }
  bool has_tiers() const { return !tiers_.empty(); }

  // A lower tier's observer (FileTierOptions::observer): passes the L2/L3 block notices on
  // to the next listener (KV events with medium DISK / SHARED_FS, metrics).
  void OnLowerTierChange(Tier tier, absl::string_view fingerprint, absl::string_view key,
                         bool stored, RemovalCause cause);

  // TierListener (called by BlockCache with its lock held).
  void OnStored(NamespaceId ns, const BlockKey& key, Tier tier) override;
  void OnEvicting(NamespaceId ns, const BlockKey& key, uint64_t offset, uint64_t length) override;
  void OnRemoved(NamespaceId ns, const BlockKey& key, Tier tier, RemovalCause cause) override;

  // Continues `result` (an L1 lookup of `keys`) into the lower tiers; see above.
  void ExtendLookup(SessionId session, NamespaceId ns, absl::Span<const std::string_view> keys,
                    std::optional<absl::Duration> lease_ttl, LookupResult* result);
  // Keeps the blocks a StartLoad promoted pinned in L1 until the load has acquired them.
  class LoadGuard {
   public:
    LoadGuard() = default;
    LoadGuard(PartitionedCache* cache, LeaseId lease) : cache_(cache), lease_(lease) {}
    LoadGuard(LoadGuard&& other) noexcept
        : cache_(std::exchange(other.cache_, nullptr)), lease_(other.lease_) {}
    LoadGuard& operator=(LoadGuard&& other) noexcept {
      std::swap(cache_, other.cache_);
      std::swap(lease_, other.lease_);
      return *this;
    }
    ~LoadGuard() {
      if (cache_ != nullptr) (void)cache_->ReleaseLease(kDaemonSession, lease_);
    }

   private:
    PartitionedCache* cache_ = nullptr;
    LeaseId lease_ = 0;
  };
  struct Promotion {
    bool done = false;  // guarded by the manager's promotion lock
  };
  // A load's promotions: started, not yet waited for. Keep it (its guard) until AcquireLoad
  // has pinned the blocks.
  struct PendingLoad {
    LoadGuard guard;
    std::vector<std::shared_ptr<Promotion>> waits;  // empty: nothing to wait for
  };
  // Starts promoting what `keys` has below L1 (on the tiers' I/O threads) and returns at
  // once: never blocks on I/O. WaitForLoad then blocks until the promotions landed or
  // promotion_wait passed.
  [[nodiscard]] PendingLoad StartLoad(NamespaceId ns, absl::Span<const std::string_view> keys);
  void WaitForLoad(const PendingLoad& load) { WaitForPromotions(load.waits); }
  // Admin: the lower tier holding each key not found in L1 (entries already set are kept).
  void Peek(NamespaceId ns, absl::Span<const std::string_view> keys,
            std::vector<std::optional<Tier>>* where);
  // Admin: removes the keys' files from `tier` (nullopt = every lower tier); returns the
  // files removed and sets removed[i] for each keys[i] whose file went (when given; sized
  // like keys).
  size_t Evict(NamespaceId ns, absl::Span<const std::string_view> keys, std::optional<Tier> tier,
               std::vector<bool>* removed = nullptr);
  size_t Clear(std::optional<NamespaceId> ns, std::optional<Tier> tier);
  // Writes every L1 block that `tier` (nullopt = each lower tier) lacks; `progress(done,
  // total)` is called as blocks finish. Returns the blocks written.
  absl::StatusOr<size_t> Drain(std::optional<Tier> tier,
                               const std::function<void(uint64_t, uint64_t)>& progress);

  std::vector<LowerTierStatus> Status() const;

 private:
  // A queued write of an L1 block. If L1 evicts the block before the write runs, its bytes
  // are copied here on the way out (under the cache lock, so the writer sees one or the
  // other: the block still in L1, or this copy).
  struct PendingWrite {
    std::string copy;
  };

  struct Lower {
    std::unique_ptr<BlockTier> storage;
    LowerTierOptions options;
    std::unique_ptr<IoPool> io;
    std::atomic<uint64_t> queued{0}, dropped{0}, promotions{0}, promoted{0};
    Mutex pending_mu;
    absl::flat_hash_map<BlockKey, std::shared_ptr<PendingWrite>> pending
        ABSL_GUARDED_BY(pending_mu);
  };
  std::optional<TierNamespace> NamespaceOf(NamespaceId ns);
  Lower* TierOf(Tier tier) const;
  // The lower tier holding `key` per the indexes; nullopt = absent; `unknown` set when a
  // probe could tell more.
  std::optional<Tier> CachedTier(const TierNamespace& tn, absl::string_view key, bool* unknown);
  // Probes keys (up to 1024) in parallel on the prober pool, skipping those past the first
  // key no tier has, and waits at most `timeout` for them (answers arriving later still
  // land in the tiers' indexes).
  void ProbeChain(const TierNamespace& tn, absl::Span<const std::string_view> keys,
                  absl::Duration timeout);
  // The leading keys present in some tier (L1 first), with the fastest tier of each.
  std::vector<Tier> LowerPrefix(NamespaceId ns, const TierNamespace& tn,
                                absl::Span<const std::string_view> keys);

  // Promotion (tier_manager_promote.cc).
  void Promote(NamespaceId ns, const TierNamespace& tn, std::vector<std::string> keys,
               std::vector<Tier> tiers, std::optional<LeaseRef> into);
  void PromoteChunk(NamespaceId ns, const TierNamespace& tn, const std::vector<std::string>& keys,
                    const std::vector<Tier>& tiers, std::optional<LeaseRef> into,
                    const std::vector<std::shared_ptr<Promotion>>& marks);
  void WaitForPromotions(const std::vector<std::shared_ptr<Promotion>>& marks);

  // Writing down (tier_manager_write.cc).
  void QueueWrite(Lower& lower, NamespaceId ns, const BlockKey& key, std::string copied);
  bool WriteFromL1(Lower& lower, NamespaceId ns, const TierNamespace& tn, absl::string_view key,
                   const PendingWrite* fallback);
  void CountHit(NamespaceId ns, const BlockKey& key);
  // The time since `start` on the monotonic clock (copy latencies).
  static absl::Duration Since(std::chrono::steady_clock::time_point start) {
    return absl::FromChrono(std::chrono::steady_clock::now() - start);
  }
  // Metrics: one copy between L1 and `tier` (down = L1 -> tier), and a dropped write.
  void RecordCopy(Tier tier, bool down, uint64_t bytes, absl::Duration took);
  void RecordDroppedWrite(Tier tier);

  NamespaceRegistry* const namespaces_;
  const absl::Duration promotion_wait_;
  PartitionedCache* cache_ = nullptr;
  char* region_ = nullptr;
  TierListener* next_ = nullptr;
  MetricsSink* metrics_ = nullptr;
  std::vector<std::unique_ptr<Lower>> tiers_;  // fastest first
  bool counts_hits_ = false;                   // some tier has an admission threshold
  std::atomic<bool> stopped_{false};           // Stop() began: no new I/O tasks

  Mutex ns_mu_;
  absl::flat_hash_map<NamespaceId, TierNamespace> ns_cache_ ABSL_GUARDED_BY(ns_mu_);
  absl::flat_hash_map<std::string, NamespaceId> ns_by_fingerprint_ ABSL_GUARDED_BY(ns_mu_);

  Mutex hits_mu_;
  absl::flat_hash_map<BlockKey, uint32_t> l1_hits_ ABSL_GUARDED_BY(hits_mu_);

  std::mutex promo_mu_;
  std::condition_variable promo_cv_;
  absl::flat_hash_map<BlockKey, std::shared_ptr<Promotion>> promoting_;  // by promo_mu_

  std::unique_ptr<IoPool> prober_;  // lookups' file probes; destroyed first
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_TIERING_TIER_MANAGER_H_
