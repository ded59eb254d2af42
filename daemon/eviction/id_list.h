// IdList: an ordered set of ids (front = most recent) with O(1) push, remove and lookup.
// A building block of the eviction policies. Not thread-safe.
#ifndef KVSTRATA_DAEMON_EVICTION_ID_LIST_H_
#define KVSTRATA_DAEMON_EVICTION_ID_LIST_H_

#include <cstdint>
#include <list>

#include "absl/container/flat_hash_map.h"

namespace kvstrata {

class IdList {
 public:
  using Id = uint64_t;

  bool Contains(Id id) const { return pos_.contains(id); }
  size_t size() const { return pos_.size(); }
  bool empty() const { return pos_.empty(); }

  // REQUIRES: !Contains(id).
  void PushFront(Id id) {
    order_.push_front(id);
    pos_.emplace(id, order_.begin());
  }
  // Returns false when absent.
  bool Remove(Id id) {
    auto it = pos_.find(id);
    if (it == pos_.end()) return false;
    order_.erase(it->second);
    pos_.erase(it);
    return true;
  }
  // Moves a present id to the front. REQUIRES: Contains(id).
  void MoveToFront(Id id) { order_.splice(order_.begin(), order_, pos_.at(id)); }
  // REQUIRES: !empty().
  Id Back() const { return order_.back(); }
  Id PopBack() {
    Id id = order_.back();
    Remove(id);
    return id;
  }

 private:
  std::list<Id> order_;
  absl::flat_hash_map<Id, std::list<Id>::iterator> pos_;
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_EVICTION_ID_LIST_H_
