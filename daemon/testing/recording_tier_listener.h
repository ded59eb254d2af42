// RecordingTierListener: a TierListener (daemon/cache/tier_listener.h) that records what it
// hears: the keys stored and removed, in order, with the removals' causes, and how many
// notices came from the tiers below L1; after Close() it also counts the lower tiers'
// notices that still arrive (a tier thread calling back after its owner stopped it). Thread-safe;
// quick, as a listener must be (it is called under the tier's lock). Header-only.
#ifndef KVSTRATA_DAEMON_TESTING_RECORDING_TIER_LISTENER_H_
#define KVSTRATA_DAEMON_TESTING_RECORDING_TIER_LISTENER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "daemon/cache/tier_listener.h"
#include "daemon/common/mutex.h"

namespace kvstrata {

class RecordingTierListener final : public TierListener {
 public:
  void OnStored(NamespaceId, const BlockKey& key, Tier tier) override {
    MutexLock lock(&mu_);
    stored_.push_back(std::string(key.bytes()));
    CountLocked(tier);
  }
  void OnRemoved(NamespaceId, const BlockKey& key, Tier tier, RemovalCause cause) override {
    MutexLock lock(&mu_);
    removed_.push_back(std::string(key.bytes()));
    causes_.push_back(cause);
    CountLocked(tier);
  }
  void Close() {
    MutexLock lock(&mu_);
    closed_ = true;
  }

  // The keys' bytes, in the order heard.
  std::vector<std::string> stored() const {
    MutexLock lock(&mu_);
    return stored_;
  }
  std::vector<std::string> removed() const {
    MutexLock lock(&mu_);
    return removed_;
  }
  // The cause of each removal, in the order of removed().
  std::vector<RemovalCause> causes() const {
    MutexLock lock(&mu_);
    return causes_;
  }
  // Notices (stored or removed) from L2 and L3.
  uint64_t lower() const {
    MutexLock lock(&mu_);
    return lower_;
  }
  // Notices from L2 and L3 heard after Close().
  uint64_t after_close() const {
    MutexLock lock(&mu_);
    return after_close_;
  }

 private:
  void CountLocked(Tier tier) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (tier == Tier::kL1) return;
    ++lower_;
    if (closed_) ++after_close_;
  }

  mutable Mutex mu_;
  std::vector<std::string> stored_ ABSL_GUARDED_BY(mu_), removed_ ABSL_GUARDED_BY(mu_);
  std::vector<RemovalCause> causes_ ABSL_GUARDED_BY(mu_);
  uint64_t lower_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t after_close_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_TESTING_RECORDING_TIER_LISTENER_H_
