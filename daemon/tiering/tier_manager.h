// TierManager: the tiers below L1 (each a BlockTier of some kind: a local directory, a
// shared filesystem, ...), as one piece that BlockStore and the daemon's set-up talk to. It is L1's
// listener and puts together pieces with one job each (every one in its own file):
// - TierStack: the tiers, fastest first, L1, the namespaces as the tiers name them;
// - WriteDown: write-through / write-back of L1 blocks into the tiers, and drain;
// - LowerLookup: which tier holds the blocks past L1's hits (indexes, then file probes);
// - Promoter: bringing blocks up into L1 for a lookup or a load.
// Leases are not made here: BlockStore makes them and hands promotions the lease the
// promoted blocks join. Shared-tier trimming is each FileTier's own (tiers/).
// Thread-safe. Listener calls arrive with BlockCache's lock held and only queue work.
// Lock order: BlockCache, then the tiering pieces' locks, then the tiers', then IoPool's.
#ifndef KVSTRATA_DAEMON_TIERING_TIER_MANAGER_H_
#define KVSTRATA_DAEMON_TIERING_TIER_MANAGER_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "daemon/cache/partitioned_cache.h"
#include "daemon/cache/tier_listener.h"
#include "daemon/metrics/metrics_sink.h"
#include "daemon/namespaces/namespace_registry.h"
#include "daemon/tiering/lower_lookup.h"
#include "daemon/tiering/promoter.h"
#include "daemon/tiering/tier_stack.h"
#include "daemon/tiering/write_down.h"
#include "daemon/tiers/block_tier.h"

namespace kvstrata {

struct LowerTierStatus {
  Tier tier = Tier::kL2;
  TierStats stats;
  uint64_t queued_writes = 0, dropped_writes = 0, deferred_writes = 0, shed_writes = 0;
  uint64_t present_writes = 0;  // stored in L1, already in this tier: not queued
  uint64_t promotions = 0, promoted_blocks = 0;
  bool write_back = false;
};

class TierManager : public TierListener {
 public:
  using Keys = absl::Span<const std::string_view>;

  // `table`: the daemon's tier table (built from the configuration; tests take the
  // standard l1/l2/l3 one), kept by the TierStack.
  TierManager(NamespaceRegistry* namespaces, absl::Duration promotion_wait,
              TierTable table = TierTable::Standard());
  TierManager(const TierManager&) = delete;
  TierManager& operator=(const TierManager&) = delete;
  ~TierManager() override;

  // Set up before serving, in this order: tiers (fastest first), then L1. Any BlockTier
  // whose level() is a lower tier of the table (tiers/tier_factory.h builds them).
  void AddTier(std::unique_ptr<BlockTier> storage, LowerTierOptions options);
  void AttachL1(PartitionedCache* cache, char* region_base) { stack_.AttachL1(cache, region_base); }
  // Stops all file I/O (queued writes and probes are dropped) and joins every thread that
  // can call back into this (the probe and I/O threads, the tiers' own background threads
  // such as L3's trim): after it returns, OnLowerTierChange is not called and nothing
  // reaches the next listener from a tier. Call before the L1 pool and the next listener go.
  void Stop();
  // Where L1 events go on to (metrics, KV events); may be nullptr.
  void SetNextListener(TierListener* next) { next_ = next; }
  // Receives the bytes and latency of every L1<->L2/L3 copy and the dropped writes.
  void SetMetrics(MetricsSink* metrics) { stack_.SetMetrics(metrics); }
  bool has_tiers() const { return !stack_.tiers().empty(); }
  // Every tier the daemon was configured with (L1 first), opened or not.
  const TierTable& table() const { return stack_.table(); }
  // How long a load waits for its promotions.
  absl::Duration promotion_wait() const { return promoter_.promotion_wait(); }
  // The pieces BlockStore drives directly: write-down (hit counts for write_down_min_hits,
  // Drain) and promotions (Wait).
  WriteDown& write_down() { return write_down_; }
  Promoter& promoter() { return promoter_; }

  // A lower tier's observer (TierContext::observer): passes its block notices on to the
  // next listener (KV events with the tier's medium and locality, metrics). Blocks of
  // namespaces not registered are not announced.
  void OnLowerTierChange(Tier tier, NamespaceId ns, absl::string_view key, bool stored,
                         RemovalCause cause);

  // TierListener (called by BlockCache with its lock held).
  void OnStored(NamespaceId ns, const BlockKey& key, Tier tier) override;
  void OnEvicting(NamespaceId ns, const BlockKey& key, uint64_t offset, uint64_t length) override;
  void OnRemoved(NamespaceId ns, const BlockKey& key, Tier tier, RemovalCause cause) override;

  // Lookups. The leading `keys` (those past L1's hits) present in some tier, with the
  // fastest tier of each; `in_l1` is L1's answer for them (LookupResult::in_l1_past_miss:
  // L1 is not asked again). Blocks up to the tiers' probe_timeout. Empty without tiers.
  std::vector<Tier> FindBelowL1(NamespaceId ns, Keys keys, const std::vector<bool>& in_l1);
  // Starts promoting keys[i] from tiers[i] into L1 (never blocks on I/O); the blocks join
  // `into` as they land. Returns the marks of their promotions, for Wait.
  Promoter::Marks Promote(NamespaceId ns, std::vector<std::string> keys, std::vector<Tier> tiers,
                          std::optional<LeaseRef> into);
  // Loads. What a load of `keys` has to wait for (promotions in flight) and to promote (the
  // keys not in L1 that a tier holds). Probes the files first while an index cannot tell
  // (a tier still scanning after a restart), up to promotion_wait.
  Promoter::LoadPlan PlanLoad(NamespaceId ns, Keys keys);

  // Admin: the lower tier holding each key not found in L1 (entries already set are kept).
  void Peek(NamespaceId ns, Keys keys, std::vector<std::optional<Tier>>* where);
  // Admin: removes the keys' files from `tier` (nullopt = every lower tier); returns the
  // files removed and sets removed[i] for each keys[i] whose file went (when given; sized
  // like keys).
  size_t Evict(NamespaceId ns, Keys keys, std::optional<Tier> tier,
               std::vector<bool>* removed = nullptr);
  size_t Clear(std::optional<NamespaceId> ns, std::optional<Tier> tier);

  std::vector<LowerTierStatus> Status() const;

 private:
  // Destroyed in reverse: the lookup's probe threads first, the tiers (and their I/O
  // threads) last; Stop() has stopped every thread before that.
  TierStack stack_;
  WriteDown write_down_;
  Promoter promoter_;
  LowerLookup lookup_;
  TierListener* next_ = nullptr;
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_TIERING_TIER_MANAGER_H_
