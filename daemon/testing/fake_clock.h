// FakeClock: a Clock that moves only when a test calls Advance. Thread-safe.
#ifndef KVSTRATA_DAEMON_TESTING_FAKE_CLOCK_H_
#define KVSTRATA_DAEMON_TESTING_FAKE_CLOCK_H_

#include "absl/base/thread_annotations.h"
#include "daemon/common/clock.h"
#include "daemon/common/mutex.h"

namespace kvstrata {

class FakeClock final : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::UnixEpoch() + absl::Hours(1)) : now_(start) {}
  absl::Time Now() const override {
    MutexLock lock(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    MutexLock lock(&mu_);
    now_ += d;
  }

 private:
  mutable Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_TESTING_FAKE_CLOCK_H_
