// Builds the daemon's tier table and its TierManager from the configuration's [[tiers]]
// list: one descriptor per entry (ids 1, 2, ... in the list's order, after L1's 0), and each
// enabled tier built by the tier factory (tiers/tier_factory.h). A tier that cannot open
// (a directory or a server that cannot be used now) is left out with an error in the log:
// the daemon serves without it and `kvstrata tiers` shows it "unavailable"; one whose
// configuration is wrong (a kind's key, refused credentials, no such bucket) stops the start.
#ifndef KVSTRATA_DAEMON_SERVER_LOWER_TIERS_H_
#define KVSTRATA_DAEMON_SERVER_LOWER_TIERS_H_

#include <memory>

#include "absl/status/statusor.h"
#include "daemon/config/config.h"
#include "daemon/namespaces/namespace_registry.h"
#include "daemon/tiering/tier_manager.h"

namespace kvstrata {

// INVALID_ARGUMENT for an entry of a kind no one registered (the configuration's checks
// let none through) or a bad key of a kind's own; UNAUTHENTICATED / PERMISSION_DENIED /
// NOT_FOUND (no bucket) from a tier that refused its credentials or bucket.
absl::StatusOr<std::unique_ptr<TierManager>> MakeTierManager(const Config& config,
                                                             NamespaceRegistry* namespaces);

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_SERVER_LOWER_TIERS_H_
