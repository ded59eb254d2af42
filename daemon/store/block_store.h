// BlockStore: looking up and loading blocks across every tier, leases included, for the
// daemon's callers (rpc/, the fast path, jobs/). What is L1's alone -- stores
// (reserve -> the caller copies -> commit / abort), releasing loads and leases, pins -- the
// callers make on L1 itself (l1()); what spans the tiers goes through here:
// - Lookup asks L1 once (its answer covers the keys past its first miss too), and when the
//   hits stop there continues in L2/L3 from that answer (their indexes, then file probes
//   bounded by each tier's probe_timeout); with a lease, the blocks found below L1 are
//   promoted into L1 and join the lease as they land -- unless the caller asks to skip
//   that (LookupPromotion::kSkip: it decides first whether to load them at all; a load
//   promotes what it needs itself, BeginLoad).
// - A load first brings its blocks up from L2/L3 into L1 (BeginLoad starts that; it blocks
//   only while a tier still scanning after a restart must be probed, up to promotion_wait;
//   FinishLoad waits at most promotion_wait), then pins them in L1. A block that did not
//   make it is simply missing: the engine recomputes it.
// - The lower tiers receive stores by write-down (TierManager's WriteDown), never on the
//   caller's path.
// - Leases are made here: a lookup's lease (L1 makes it with the L1 hits; the blocks found
//   below L1 join it, those still in L1 at once, the others as their promotions land) and a
//   load's own daemon lease on what its promotions bring up (PendingLoad).
// - Lease TTLs: a request's TTL (0 = the default) is clamped to the maximum here, once.
// Thread-safe. Blocking: Lookup up to the probe timeouts; BeginLoad, FinishLoad and
// AcquireLoad up to promotion_wait; everything else only on L1's locks.
#ifndef KVSTRATA_DAEMON_STORE_BLOCK_STORE_H_
#define KVSTRATA_DAEMON_STORE_BLOCK_STORE_H_

#include <array>
#include <functional>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "daemon/cache/partitioned_cache.h"
#include "daemon/common/ids.h"
#include "daemon/store/pending_load.h"
#include "daemon/tiering/tier_manager.h"

namespace kvstrata {

// Which tiers an admin operation acts on: L1 and/or the lower tiers (one, or all of them
// when lower_tier is nullopt).
struct TierSelection {
  bool l1 = true;
  bool lower = true;
  std::optional<Tier> lower_tier;
};

// What an admin Evict did: blocks (L1) and files (each lower tier's, by tier id) removed,
// the keys that left at least one tier, and the pinned keys left alone.
struct EvictCounts {
  size_t l1 = 0;
  std::array<size_t, kMaxTiers> files{};
  size_t keys = 0;
  size_t pinned = 0;
};

// Whether a lookup with a lease starts promoting the hits it finds below L1 (kStart), or
// only answers them (kSkip: the lease holds the hits in L1; nothing is read from L2/L3).
enum class LookupPromotion { kStart, kSkip };

struct BlockStoreOptions {
  absl::Duration default_lease_ttl = absl::Seconds(5);  // [sessions] lease_ttl_ms
  absl::Duration max_lease_ttl = absl::Minutes(1);      // [sessions] max_lease_ttl_ms
};

class BlockStore {
 public:
  using Keys = absl::Span<const std::string_view>;

  // `l1` and `lower` (nullptr: no L2/L3) are not owned and outlive the store.
  BlockStore(PartitionedCache* l1, TierManager* lower, BlockStoreOptions options)
      : l1_(l1), lower_(lower), options_(options) {}

  // Whether loads may have to wait for promotions from L2/L3 (lower tiers are attached).
  bool promotes() const { return lower_ != nullptr; }
  // The TTL of a lease asked for with `requested` (zero: the default), at most the maximum.
  absl::Duration LeaseTtl(absl::Duration requested) const;

  // The leading keys present in some tier, the fastest tier of each, and with `lease_ttl`
  // (already through LeaseTtl) a lease on them when there is a hit: the hits in L1 join it
  // at once, those below L1 as they are promoted (`promotion` kStart; with kSkip they are
  // answered, not promoted, and not in the lease). Without a lease nothing is promoted.
  absl::StatusOr<LookupResult> Lookup(SessionId session, NamespaceId ns, Keys keys,
                                      std::optional<absl::Duration> lease_ttl,
                                      LookupPromotion promotion = LookupPromotion::kStart);

  // L1 itself: stores (reserve, commit, abort), releases of loads and leases, and pins
  // are L1's alone, so callers make them there.
  PartitionedCache& l1() const { return *l1_; }

  // Starts promoting what `keys` has below L1 and returns; blocks only while a tier still
  // scanning after a restart has to be probed (up to promotion_wait). Hand the result to
  // FinishLoad.
  PendingLoad BeginLoad(NamespaceId ns, Keys keys);
  // Waits for `pending` (bounded), then pins the keys' L1 blocks for the caller's copies.
  absl::StatusOr<LoadResult> FinishLoad(SessionId session, NamespaceId ns, Keys keys,
                                        std::optional<LeaseId> lease, PendingLoad pending);
  // BeginLoad + FinishLoad.
  absl::StatusOr<LoadResult> AcquireLoad(SessionId session, NamespaceId ns, Keys keys,
                                         std::optional<LeaseId> lease) {
    return FinishLoad(session, ns, keys, lease, BeginLoad(ns, keys));
  }

  // Admin: the fastest tier holding each key (L1 first), nullopt where none does. Probes
  // the lower tiers' files for keys their indexes do not know.
  absl::StatusOr<std::vector<std::optional<Tier>>> Peek(NamespaceId ns, Keys keys);
  // Admin: removes the keys from the selected tiers. A pin keeps a block in every tier:
  // pinned keys are left in L1 and their L2/L3 files too. Blocks in use are skipped.
  absl::StatusOr<EvictCounts> Evict(NamespaceId ns, Keys keys, const TierSelection& tiers);
  // Admin: every block of `ns` (nullopt: of every namespace) in the selected tiers. Returns
  // L1 blocks and lower-tier files removed.
  std::pair<size_t, size_t> Clear(std::optional<NamespaceId> ns, const TierSelection& tiers);
  // Admin: each lower tier's state and counters, fastest first (empty without L2/L3).
  // The daemon's tier table (L1 alone without lower tiers).
  const TierTable& tier_table() const {
    static const TierTable kL1Only;
    return lower_ != nullptr ? lower_->table() : kL1Only;
  }
  std::vector<LowerTierStatus> LowerTiers() const {
    return lower_ != nullptr ? lower_->Status() : std::vector<LowerTierStatus>{};
  }
  // FAILED_PRECONDITION when no lower tier is enabled (nothing to drain to), else OK.
  absl::Status CheckDrainable() const;
  // Admin: writes every L1 block the lower tier `tier` (nullopt: each) lacks; blocks on I/O
  // until done, calling progress(done, total). CheckDrainable's error without lower tiers.
  absl::StatusOr<size_t> Drain(std::optional<Tier> tier,
                               const std::function<void(uint64_t, uint64_t)>& progress);

 private:
  // A lookup found `tiers` (past L1's hits) for `keys`: they join the lookup's lease (made
  // now if L1 had no hit), promoted into it where they are below L1 (kStart).
  void LeaseBelowL1(SessionId session, NamespaceId ns, Keys keys, const std::vector<Tier>& tiers,
                    absl::Duration ttl, LookupPromotion promotion, LookupResult* result);

  PartitionedCache* const l1_;
  TierManager* const lower_;
  const BlockStoreOptions options_;
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_STORE_BLOCK_STORE_H_
