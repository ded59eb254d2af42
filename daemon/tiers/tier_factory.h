// The tier kinds, and the one factory that builds a tier below L1 from its configuration
// entry (a [[tiers]] entry: config.h's LowerTierConfig), as MakeEvictionPolicy builds an
// eviction policy from its name.
//
// A kind is a name (the entry's `kind`), what the tier table says of its tiers (KV events'
// medium and locality, whether other nodes share it) and how to build one. Kinds today:
// "local-file" (FileTier over a directory only this daemon writes) and "shared-file"
// (FileTier over a directory every node's daemon writes). A new kind is one folder under
// daemon/tiers/ (a BlockTier; its CMakeLists.txt adds its sources to kvstrata_tiers), one
// line in kKinds (tier_factory.cc), its keys and defaults as a [tier_kinds.<kind>] table of
// the embedded default configuration, and its factory in the contract suite
// (tests/unit/tiers/block_tier_factories.h; tier_factory_test.cc checks that every kind
// registered here has one).
//
// Thread-safe (pure functions over a constant table).
#ifndef KVSTRATA_DAEMON_TIERS_TIER_FACTORY_H_
#define KVSTRATA_DAEMON_TIERS_TIER_FACTORY_H_

#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/common/clock.h"
#include "daemon/common/ids.h"
#include "daemon/common/tier.h"
#include "daemon/common/tier_table.h"
#include "daemon/config/config.h"
#include "daemon/namespaces/namespace_ids.h"
#include "daemon/tiers/block_file_system.h"
#include "daemon/tiers/block_tier.h"

namespace kvstrata {

// What a built tier needs from the daemon besides its entry. Nothing here is owned; all of
// it outlives the tier.
struct TierContext {
  // The daemon's namespace ids (its NamespaceRegistry): one id space with L1 and the wire.
  NamespaceIds* namespace_ids = nullptr;
  // Called (with the tier's lock held: be quick, do not call back) when a block this tier
  // wrote becomes findable (stored) or leaves it, with why.
  std::function<void(NamespaceId ns, absl::string_view key, bool stored, RemovalCause cause)>
      observer;
  BlockFileSystem* files = nullptr;  // nullptr = POSIX (tests inject faults)
  Clock* clock = nullptr;            // nullptr = the system clock
};

// The names of every kind registered, in registration order.
std::vector<std::string_view> TierKindNames();

// The descriptor of `entry` (label, kind, the kind's medium, locality and sharing, enabled);
// its id is the table's to give (TierTable::Add). INVALID_ARGUMENT for a kind no one
// registered.
absl::StatusOr<TierDescriptor> DescribeTier(const LowerTierConfig& entry);

// The daemon's tier table for the [[tiers]] list `entries`: L1, then one descriptor per
// entry in its order (ids 1, 2, ...), enabled or not. INVALID_ARGUMENT for an unknown kind.
absl::StatusOr<TierTable> BuildTierTable(const std::vector<LowerTierConfig>& entries);

// Builds and opens the tier of `entry` as `descriptor` (DescribeTier's, with its id).
// INVALID_ARGUMENT for an unknown kind; the kind's error when it cannot open (a directory
// that cannot be used: FAILED_PRECONDITION).
absl::StatusOr<std::unique_ptr<BlockTier>> MakeTier(const LowerTierConfig& entry,
                                                    const TierDescriptor& descriptor,
                                                    const TierContext& context);

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_TIERS_TIER_FACTORY_H_
