// Which sessions handed the shared-memory region to a process that may still write it.
//
// A host-mode client maps the whole L1 region read/write. Ending its session (missed
// heartbeats, close) or expiring its reservation does not stop a thread of that process
// that is paused between reserve and copy: it may still write the slots it reserved, or
// read the slots it loads. So those slots must not go back to the pool while the process
// lives. The fd server records, for every session it hands the region to, a pidfd of the
// peer (SO_PEERPIDFD, else pidfd_open of SO_PEERCRED's pid); the cache asks MayWrite before
// it frees a session's slots, and the daemon's reaper asks Exited to learn whose process
// has gone. A session whose peer could not be identified counts as alive forever (its
// slots stay fenced until the daemon restarts): wrong bytes are worse than lost capacity.
//
// Thread-safe (one mutex, never held while calling out). Owns the pidfds.
#ifndef KVSTRATA_DAEMON_SESSION_PROCESS_FENCE_H_
#define KVSTRATA_DAEMON_SESSION_PROCESS_FENCE_H_

#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "daemon/common/mutex.h"

namespace kvstrata {

class ProcessFence {
 public:
  ProcessFence() = default;
  ProcessFence(const ProcessFence&) = delete;
  ProcessFence& operator=(const ProcessFence&) = delete;
  ~ProcessFence();  // Closes every pidfd.

  // The pidfd (owned from now on; -1 when the peer is unknown) of the process that
  // `connection`'s peer is, or -1. Does not block.
  static int PeerPidfd(int connection);

  // `session` handed the region to the process behind `pidfd` (owned; -1 = unknown).
  // A second call for the same session keeps both processes.
  void Track(uint64_t session, int pidfd);
  // True when a process that `session` handed the region to may still be running.
  bool MayWrite(uint64_t session) const;
  // Stops tracking `session` (nothing of it is fenced any more); closes its pidfds.
  void Forget(uint64_t session);
  // Tracked sessions all of whose processes have exited; they are forgotten. Does not block.
  std::vector<uint64_t> Exited();
  size_t size() const;

 private:
  static bool Running(int pidfd);

  mutable Mutex mu_;
  absl::flat_hash_map<uint64_t, std::vector<int>> pidfds_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_SESSION_PROCESS_FENCE_H_
