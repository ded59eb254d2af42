// The daemon's mutex: std::mutex with Abseil's thread-safety annotations, so clang's
// -Wthread-safety checks ABSL_GUARDED_BY members, and ThreadSanitizer (which intercepts
// pthread mutexes but not the futexes of the distribution's uninstrumented absl::Mutex)
// sees every lock. Same spelling as absl: Mutex, MutexLock lock(&mu_).
#ifndef KVSTRATA_DAEMON_COMMON_MUTEX_H_
#define KVSTRATA_DAEMON_COMMON_MUTEX_H_

#include <mutex>

#include "absl/base/thread_annotations.h"

namespace kvstrata {

class ABSL_LOCKABLE Mutex {
 public:
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  bool TryLock() ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true) { return mu_.try_lock(); }

 private:
  std::mutex mu_;
};

class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_COMMON_MUTEX_H_
