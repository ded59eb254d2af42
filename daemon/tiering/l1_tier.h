// L1Tier: the L1 cache (a PartitionedCache over the shared region) seen as a BlockTier
// (daemon/tiers/block_tier.h), under the daemon's own session (kDaemonSession): Write is
// reserve -> copy -> commit, Read is acquire -> copy -> release. Its namespaces are the
// registry's: a fingerprint no engine registered has no blocks here (Read misses, Write
// answers NOT_FOUND). L1's index is complete, so Cached never says kUnknown and Probe does
// no I/O. Writes bypass L1's admission (the daemon decided to keep the block) and may be
// dropped under pool pressure (RESOURCE_EXHAUSTED). Stats: the front's counters (this
// adapter's Reads and Writes) over L1's own sizes and evictions; L1's lookup hits are
// CacheStats'. Thread-safe; never blocks on I/O (the copies are memcpy between the region
// and the caller's buffer).
#ifndef KVSTRATA_DAEMON_TIERING_L1_TIER_H_
#define KVSTRATA_DAEMON_TIERING_L1_TIER_H_

#include <optional>

#include "daemon/cache/partitioned_cache.h"
#include "daemon/namespaces/namespace_registry.h"
#include "daemon/tiers/block_tier.h"

namespace kvstrata {

class L1Tier : public BlockTier {
 public:
  // None owned; all outlive the adapter. `region` is the shared region's base address.
  L1Tier(PartitionedCache* cache, char* region, const NamespaceRegistry* namespaces)
      : cache_(cache), region_(region), namespaces_(namespaces) {}

  Tier level() const override { return Tier::kL1; }
  std::string label() const override { return "l1"; }

 protected:
  Presence CachedImpl(const TierNamespace& ns, absl::string_view key) const override;
  bool ProbeImpl(const TierNamespace& ns, absl::string_view key) override {
    return CachedImpl(ns, key) == Presence::kPresent;
  }
  bool ReadImpl(const TierNamespace& ns, absl::string_view key, absl::Span<char> dest) override;
  absl::StatusOr<WriteOutcome> WriteImpl(const TierNamespace& ns, absl::string_view key,
                                         absl::string_view payload) override;
  bool RemoveImpl(const TierNamespace& ns, absl::string_view key) override;
  size_t ClearImpl(std::optional<absl::string_view> fingerprint) override;
  TierStats StatsImpl() const override;

 private:
  // The namespace's id when it is registered (by ns.id, else by its fingerprint).
  std::optional<NamespaceId> IdOf(const TierNamespace& ns) const;
  std::optional<NamespaceId> IdOf(absl::string_view fingerprint) const;

  PartitionedCache* const cache_;
  char* const region_;
  const NamespaceRegistry* const namespaces_;
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_TIERING_L1_TIER_H_
