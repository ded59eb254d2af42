// S3FifoPolicy: S3-FIFO (Yang et al., SOSP'23). New entries enter a small FIFO (~10% of
// capacity); those accessed again while there move to the main FIFO, the rest leave and
// are remembered in a ghost FIFO so that a quick return goes straight to main. Main is a
// FIFO with lazy promotion (a 2-bit frequency, reinserted while non-zero).
// Not thread-safe (see EvictionPolicy).
#ifndef KVSTRATA_DAEMON_EVICTION_S3FIFO_POLICY_H_
#define KVSTRATA_DAEMON_EVICTION_S3FIFO_POLICY_H_

#include <cstdint>

#include "absl/container/flat_hash_map.h"
#include "daemon/eviction/eviction_policy.h"
#include "daemon/eviction/id_list.h"

namespace kvstrata {

class S3FifoPolicy final : public EvictionPolicy {
 public:
  explicit S3FifoPolicy(size_t capacity) { SetCapacity(capacity); }

  std::string_view Name() const override { return "s3fifo"; }
  void OnInsert(Id id) override;
  void OnAccess(Id id) override;
  void OnErase(Id id) override;
  std::optional<Id> PickVictim(MayEvict may_evict) override;
  bool Contains(Id id) const override { return freq_.contains(id); }
  size_t Size() const override { return freq_.size(); }
  void SetCapacity(size_t entries) override;

 private:
  std::optional<Id> EvictFromSmall(MayEvict may_evict);
  std::optional<Id> EvictFromMain(MayEvict may_evict);

  size_t capacity_ = 1;
  size_t small_target_ = 1;
  IdList small_, main_, ghost_;
  absl::flat_hash_map<Id, uint8_t> freq_;  // resident entries -> access frequency (0..3)
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_EVICTION_S3FIFO_POLICY_H_
