// Finished jobs waiting to be delivered to their session, and the waiting for them.
// Delivery is either a non-blocking Poll or a Wait that blocks a watcher (the
// WatchCompletions stream) until a completion arrives, the session ends, or Shutdown.
// Thread-safe.
#ifndef KVSTRATA_DAEMON_JOBS_COMPLETION_QUEUE_H_
#define KVSTRATA_DAEMON_JOBS_COMPLETION_QUEUE_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "daemon/common/ids.h"

namespace kvstrata {

struct JobCompletion {
  enum class Kind { kStore, kLoad };
  uint64_t job_id = 0;
  Kind kind = Kind::kStore;
  std::vector<uint32_t> failed_blocks;  // Indices into the job's blocks.
  std::string error;
  absl::Duration elapsed;  // From StartJob to the completion.
  bool ok() const { return failed_blocks.empty() && error.empty(); }
};

class CompletionQueue {
 public:
  void Push(SessionId session, JobCompletion completion);
  // Up to `max` (0 = all) completions of the session, oldest first.
  std::vector<JobCompletion> Poll(SessionId session, size_t max);
  // Waits up to `timeout` for the session to have completions. False when the wait ended
  // because the session ended or the queue shut down (nothing more will come).
  bool Wait(SessionId session, absl::Duration timeout);
  // Marks the session live (completions are kept for it) or ended (dropped, waiters woken).
  void OpenSession(SessionId session);
  void EndSession(SessionId session);
  void Shutdown();
  // Completions waiting to be polled, over all sessions.
  size_t pending() const;

 private:
  mutable std::mutex mu_;
  std::condition_variable changed_;
  absl::flat_hash_map<uint64_t, std::deque<JobCompletion>> pending_;  // Guarded by mu_.
  bool shut_down_ = false;                                            // Guarded by mu_.
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_JOBS_COMPLETION_QUEUE_H_
