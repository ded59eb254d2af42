// Test helper: replays a trace of ids through a policy as a cache of `capacity` entries.
#ifndef KVSTRATA_TESTS_UNIT_EVICTION_POLICY_SIM_H_
#define KVSTRATA_TESTS_UNIT_EVICTION_POLICY_SIM_H_

#include <vector>

#include "daemon/eviction/eviction_policy.h"

namespace kvstrata {

// Returns the number of hits; every miss inserts, evicting first when full.
inline size_t ReplayHits(EvictionPolicy& policy, const std::vector<uint64_t>& trace,
                         size_t capacity) {
  size_t hits = 0;
  for (uint64_t id : trace) {
    if (policy.Contains(id)) {
      policy.OnAccess(id);
      ++hits;
      continue;
    }
    if (policy.Size() >= capacity) policy.PickVictim([](uint64_t) { return true; });
    policy.OnInsert(id);
  }
  return hits;
}

}  // namespace kvstrata

#endif  // KVSTRATA_TESTS_UNIT_EVICTION_POLICY_SIM_H_
