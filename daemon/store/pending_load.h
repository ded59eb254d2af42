// PendingLoad: a load's promotions from L2/L3, started by BlockStore::BeginLoad and waited
// for by FinishLoad. It holds the daemon's own lease on what the promotions bring into L1
// (and on the load's blocks already there, which the promotions must not evict to make
// room) until the caller's load has pinned them; the lease ends when it goes. Move-only.
#ifndef KVSTRATA_DAEMON_STORE_PENDING_LOAD_H_
#define KVSTRATA_DAEMON_STORE_PENDING_LOAD_H_

#include <utility>

#include "daemon/cache/partitioned_cache.h"
#include "daemon/common/ids.h"
#include "daemon/tiering/promoter.h"

namespace kvstrata {

class PendingLoad {
 public:
  PendingLoad() = default;
  PendingLoad(PendingLoad&& other) noexcept
      : l1_(std::exchange(other.l1_, nullptr)),
        lease_(other.lease_),
        waits_(std::move(other.waits_)) {}
  PendingLoad& operator=(PendingLoad&& other) noexcept {
    std::swap(l1_, other.l1_);
    std::swap(lease_, other.lease_);
    std::swap(waits_, other.waits_);
    return *this;
  }
  ~PendingLoad() {
    if (l1_ != nullptr) (void)l1_->ReleaseLease(kDaemonSession, lease_);
  }

  // The daemon's lease (of kDaemonSession) in `l1` that this load's promotions join.
  void HoldLease(PartitionedCache* l1, LeaseId lease) {
    l1_ = l1;
    lease_ = lease;
  }
  // Promotions to wait for (empty: nothing to wait for).
  Promoter::Marks& waits() { return waits_; }
  const Promoter::Marks& waits() const { return waits_; }

 private:
  PartitionedCache* l1_ = nullptr;
  LeaseId lease_ = 0;
  Promoter::Marks waits_;
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_STORE_PENDING_LOAD_H_
