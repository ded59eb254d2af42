#include "daemon/eviction/s3fifo_policy.h"

#include <algorithm>

namespace kvstrata {

void S3FifoPolicy::SetCapacity(size_t entries) {
  capacity_ = std::max<size_t>(1, entries);
  small_target_ = std::max<size_t>(1, capacity_ / 10);
}

void S3FifoPolicy::OnInsert(Id id) {
  freq_[id] = 0;
  if (ghost_.Remove(id)) {
    main_.PushFront(id);
  } else {
    small_.PushFront(id);
  }
}

void S3FifoPolicy::OnAccess(Id id) {
  auto it = freq_.find(id);
  if (it != freq_.end() && it->second < 3) ++it->second;
}

void S3FifoPolicy::OnErase(Id id) {
  if (freq_.erase(id) == 0) return;
  if (!small_.Remove(id)) main_.Remove(id);
}

std::optional<EvictionPolicy::Id> S3FifoPolicy::PickVictim(MayEvict may_evict) {
  std::optional<Id> victim;
  if (small_.size() >= small_target_ || main_.empty()) victim = EvictFromSmall(may_evict);
  if (!victim) victim = EvictFromMain(may_evict);
  if (!victim) victim = EvictFromSmall(may_evict);
  if (victim) freq_.erase(*victim);
  return victim;
}

std::optional<EvictionPolicy::Id> S3FifoPolicy::EvictFromSmall(MayEvict may_evict) {
  for (size_t tries = small_.size(); tries > 0 && !small_.empty(); --tries) {
    Id id = small_.PopBack();
    uint8_t& freq = freq_[id];
    if (freq > 0) {  // accessed while in small: promote to main
      freq = 0;
      main_.PushFront(id);
    } else if (may_evict(id)) {
      ghost_.PushFront(id);
      while (ghost_.size() > capacity_) ghost_.PopBack();
      return id;
    } else {
      small_.PushFront(id);  // in use: give it another round
    }
  }
  return std::nullopt;
}

std::optional<EvictionPolicy::Id> S3FifoPolicy::EvictFromMain(MayEvict may_evict) {
  // Each entry is reinserted at most 4 times (frequency <= 3, then a may_evict refusal).
  for (size_t tries = 5 * main_.size(); tries > 0 && !main_.empty(); --tries) {
    Id id = main_.PopBack();
    uint8_t& freq = freq_[id];
    if (freq > 0) {
      --freq;
      main_.PushFront(id);
    } else if (may_evict(id)) {
      return id;
    } else {
      main_.PushFront(id);
    }
  }
  return std::nullopt;
}

}  // namespace kvstrata
