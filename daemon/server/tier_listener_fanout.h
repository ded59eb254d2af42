// TierListenerFanout: hands every tier notice to several TierListeners in order (the
// metrics and the KV events listen to the same tiers). Listeners are not owned and are
// added before the tiers start. Thread-safe after setup, as its listeners.
#ifndef KVSTRATA_DAEMON_SERVER_TIER_LISTENER_FANOUT_H_
#define KVSTRATA_DAEMON_SERVER_TIER_LISTENER_FANOUT_H_

#include <vector>

#include "daemon/cache/tier_listener.h"

namespace kvstrata {

class TierListenerFanout : public TierListener {
 public:
  // REQUIRES: before any notice; `listener` outlives this fanout's use. Null is ignored.
  void Add(TierListener* listener) {
    if (listener != nullptr) listeners_.push_back(listener);
  }

  void OnStored(NamespaceId ns, const BlockKey& key, Tier tier) override {
    for (TierListener* l : listeners_) l->OnStored(ns, key, tier);
  }
  void OnRemoved(NamespaceId ns, const BlockKey& key, Tier tier, RemovalCause cause) override {
    for (TierListener* l : listeners_) l->OnRemoved(ns, key, tier, cause);
  }

 private:
  std::vector<TierListener*> listeners_;
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_SERVER_TIER_LISTENER_FANOUT_H_
