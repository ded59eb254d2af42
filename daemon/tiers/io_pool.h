// IoPool: the threads that do one tier's file I/O. Three queues, each run before the next:
// urgent work (reads that a load waits for, lookups' file probes), normal work (writes of
// blocks that were reused while they waited), background work (the other writes), so a
// write backlog never delays a load. Tasks must not throw.
// Thread-safe. The destructor drops queued tasks (destroyed unrun) and joins the threads
// once the running ones finish.
#ifndef KVSTRATA_DAEMON_TIERS_IO_POOL_H_
#define KVSTRATA_DAEMON_TIERS_IO_POOL_H_

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kvstrata {

class IoPool {
 public:
  enum class Priority { kUrgent, kNormal, kBackground };  // in the order they run

  explicit IoPool(size_t threads);
  IoPool(const IoPool&) = delete;
  IoPool& operator=(const IoPool&) = delete;
  ~IoPool();

  // Queues the task; a no-op once Stop() began.
  void Submit(Priority priority, std::function<void()> task);
  // Drops the queued tasks and joins the threads once the running ones finish; later
  // Submits are dropped. Idempotent; the pool stays usable as an object (so tasks still
  // running may Submit to it while another thread stops it).
  void Stop();
  // Tasks queued (not running) at each priority.
  size_t Queued(Priority priority) const;

 private:
  void Run();

  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> queues_[3];  // by Priority
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_TIERS_IO_POOL_H_
