#include "daemon/events/kv_event_listener.h"

namespace kvstrata {

void KvEventListener::OnStored(NamespaceId ns, const BlockKey& key, Tier tier) {
  live_.fetch_add(1, std::memory_order_relaxed);
  publisher_->Push({KvEventKind::kBlockStored, ns, tier, ExternalBlockHash(key.bytes())});
}

void KvEventListener::OnRemoved(NamespaceId ns, const BlockKey& key, Tier tier,
                                RemovalCause cause) {
  int64_t before = live_.fetch_sub(1, std::memory_order_relaxed);
  publisher_->Push({KvEventKind::kBlockRemoved, ns, tier, ExternalBlockHash(key.bytes())});
  if (cause == RemovalCause::kCleared && before == 1) {
    publisher_->Push({KvEventKind::kAllBlocksCleared, 0, tier, 0});
  }
}

}  // namespace kvstrata
