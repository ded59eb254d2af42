// A condition variable for kvstrata::Mutex (daemon/common/mutex.h has none yet): wraps
// std::condition_variable_any around an adapter that locks the Mutex. Thread-safe.
#ifndef KVSTRATA_DAEMON_TRANSFER_COND_VAR_H_
#define KVSTRATA_DAEMON_TRANSFER_COND_VAR_H_

#include <condition_variable>

#include "daemon/common/mutex.h"

namespace kvstrata {

class CondVar {
 public:
  // REQUIRES: `mu` held; it is released while waiting and held again on return.
  template <typename Predicate>
  void Wait(Mutex* mu, Predicate done) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    Adapter adapter{mu};
    cv_.wait(adapter, done);
  }
  void SignalAll() { cv_.notify_all(); }

 private:
  struct Adapter {
    Mutex* mu;
    void lock() ABSL_NO_THREAD_SAFETY_ANALYSIS { mu->Lock(); }
    void unlock() ABSL_NO_THREAD_SAFETY_ANALYSIS { mu->Unlock(); }
  };
  std::condition_variable_any cv_;
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_TRANSFER_COND_VAR_H_
