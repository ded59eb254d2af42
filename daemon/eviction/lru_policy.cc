#include "daemon/eviction/lru_policy.h"

namespace kvstrata {

std::optional<EvictionPolicy::Id> LruPolicy::PickVictim(MayEvict may_evict) {
  for (size_t tries = list_.size(); tries > 0; --tries) {
    Id id = list_.Back();
    if (may_evict(id)) {
      list_.Remove(id);
      return id;
    }
    list_.MoveToFront(id);
  }
  return std::nullopt;
}

}  // namespace kvstrata
