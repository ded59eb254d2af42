// LruPolicy: least recently used. A victim candidate that may not be evicted is moved to
// the front (it is in use), so pinned entries do not make every PickVictim rescan them.
// Not thread-safe (see EvictionPolicy).
#ifndef KVSTRATA_DAEMON_EVICTION_LRU_POLICY_H_
#define KVSTRATA_DAEMON_EVICTION_LRU_POLICY_H_

#include "daemon/eviction/eviction_policy.h"
#include "daemon/eviction/id_list.h"

namespace kvstrata {

class LruPolicy final : public EvictionPolicy {
 public:
  std::string_view Name() const override { return "lru"; }
  void OnInsert(Id id) override { list_.PushFront(id); }
  void OnAccess(Id id) override {
    if (list_.Contains(id)) list_.MoveToFront(id);
  }
  void OnErase(Id id) override { list_.Remove(id); }
  std::optional<Id> PickVictim(MayEvict may_evict) override;
  bool Contains(Id id) const override { return list_.Contains(id); }
  size_t Size() const override { return list_.size(); }
  void SetCapacity(size_t) override {}

 private:
  IdList list_;
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_EVICTION_LRU_POLICY_H_
