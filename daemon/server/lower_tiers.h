// Builds the TierManager and its L2/L3 FileTiers from the [l2]/[l3] configuration. A tier
// whose directory cannot be used is left out with an error in the log (the daemon serves
// without it; `kvstrata tiers` shows it "unavailable").
#ifndef KVSTRATA_DAEMON_SERVER_LOWER_TIERS_H_
#define KVSTRATA_DAEMON_SERVER_LOWER_TIERS_H_

#include <memory>

#include "daemon/config/config.h"
#include "daemon/namespaces/namespace_registry.h"
#include "daemon/tiering/tier_manager.h"

namespace kvstrata {

std::unique_ptr<TierManager> MakeTierManager(const Config& config, NamespaceRegistry* namespaces);

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_SERVER_LOWER_TIERS_H_
