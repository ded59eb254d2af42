// KvEventListener: the TierListener that feeds the EventPublisher. Each OnStored and
// OnRemoved becomes one pending BlockStored / BlockRemoved notice (so every BlockRemoved
// pairs with one earlier BlockStored of the same block and tier); when a clear leaves no
// block in any tier, an AllBlocksCleared follows the removals. Quick and lock-free apart
// from the publisher's queue push, as TierListener requires. Thread-safe.
#ifndef KVSTRATA_DAEMON_EVENTS_KV_EVENT_LISTENER_H_
#define KVSTRATA_DAEMON_EVENTS_KV_EVENT_LISTENER_H_

#include <atomic>
#include <cstdint>

#include "daemon/cache/tier_listener.h"
#include "daemon/events/event_publisher.h"

namespace kvstrata {

class KvEventListener : public TierListener {
 public:
  // `publisher` is not owned and must outlive the listener's use.
  explicit KvEventListener(EventPublisher* publisher) : publisher_(publisher) {}

  void OnStored(NamespaceId ns, const BlockKey& key, Tier tier) override;
  void OnRemoved(NamespaceId ns, const BlockKey& key, Tier tier, RemovalCause cause) override;

  // Blocks currently present, counted once per tier.
  int64_t live_blocks() const { return live_.load(std::memory_order_relaxed); }

 private:
  EventPublisher* const publisher_;
  std::atomic<int64_t> live_{0};
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_EVENTS_KV_EVENT_LISTENER_H_
