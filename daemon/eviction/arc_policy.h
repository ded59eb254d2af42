// ArcPolicy: Adaptive Replacement Cache (Megiddo & Modha, FAST'03). T1 holds entries seen
// once, T2 entries seen at least twice; ghosts B1/B2 remember recent evictions from each
// and steer the target size p of T1. Resists scans: one-time keys only churn T1.
// Not thread-safe (see EvictionPolicy).
#ifndef KVSTRATA_DAEMON_EVICTION_ARC_POLICY_H_
#define KVSTRATA_DAEMON_EVICTION_ARC_POLICY_H_

#include "daemon/eviction/eviction_policy.h"
#include "daemon/eviction/id_list.h"

namespace kvstrata {

class ArcPolicy final : public EvictionPolicy {
 public:
  explicit ArcPolicy(size_t capacity) : capacity_(capacity == 0 ? 1 : capacity) {}

  std::string_view Name() const override { return "arc"; }
  void OnInsert(Id id) override;
  void OnAccess(Id id) override;
  void OnErase(Id id) override;
  std::optional<Id> PickVictim(MayEvict may_evict) override;
  bool Contains(Id id) const override { return t1_.Contains(id) || t2_.Contains(id); }
  size_t Size() const override { return t1_.size() + t2_.size(); }
  void SetCapacity(size_t entries) override { capacity_ = entries == 0 ? 1 : entries; }

 private:
  // Evicts the first evictable entry from the LRU end of `from` into ghost list `ghost`.
  std::optional<Id> EvictFrom(IdList& from, IdList& ghost, MayEvict may_evict);
  void TrimGhosts();

  size_t capacity_;
  size_t p_ = 0;  // target size of T1
  IdList t1_, t2_, b1_, b2_;
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_EVICTION_ARC_POLICY_H_
