#include "daemon/eviction/arc_policy.h"

#include <algorithm>

namespace kvstrata {

void ArcPolicy::OnInsert(Id id) {
  if (b1_.Remove(id)) {  // recently evicted from T1: T1 should be larger
    size_t delta = std::max<size_t>(1, b2_.size() / std::max<size_t>(1, b1_.size() + 1));
    p_ = std::min(capacity_, p_ + delta);
    t2_.PushFront(id);
  } else if (b2_.Remove(id)) {  // recently evicted from T2: T2 should be larger
    size_t delta = std::max<size_t>(1, (b1_.size()) / std::max<size_t>(1, b2_.size() + 1));
    p_ = p_ > delta ? p_ - delta : 0;
    t2_.PushFront(id);
  } else {
    t1_.PushFront(id);
  }
  TrimGhosts();
}

void ArcPolicy::OnAccess(Id id) {
  if (t1_.Remove(id)) {
    t2_.PushFront(id);
  } else if (t2_.Contains(id)) {
    t2_.MoveToFront(id);
  }
}

void ArcPolicy::OnErase(Id id) {
  if (!t1_.Remove(id)) t2_.Remove(id);
}

std::optional<EvictionPolicy::Id> ArcPolicy::PickVictim(MayEvict may_evict) {
  bool t1_first = !t1_.empty() && (t1_.size() > p_ || t2_.empty());
  IdList& first = t1_first ? t1_ : t2_;
  IdList& second = t1_first ? t2_ : t1_;
  std::optional<Id> victim = EvictFrom(first, t1_first ? b1_ : b2_, may_evict);
  if (!victim) victim = EvictFrom(second, t1_first ? b2_ : b1_, may_evict);
  TrimGhosts();
  return victim;
}

std::optional<EvictionPolicy::Id> ArcPolicy::EvictFrom(IdList& from, IdList& ghost,
                                                       MayEvict may_evict) {
  for (size_t tries = from.size(); tries > 0; --tries) {
    Id id = from.Back();
    if (may_evict(id)) {
      from.Remove(id);
      ghost.PushFront(id);
      return id;
    }
    from.MoveToFront(id);  // in use: treat as recently used
  }
  return std::nullopt;
}

void ArcPolicy::TrimGhosts() {
  while (!b1_.empty() && t1_.size() + b1_.size() > capacity_) b1_.PopBack();
  while (!b2_.empty() && Size() + b1_.size() + b2_.size() > 2 * capacity_) b2_.PopBack();
}

}  // namespace kvstrata
