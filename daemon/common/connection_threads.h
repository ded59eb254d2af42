// One thread per accepted connection, at most `max` at once: what the fd server and the
// fast-path socket both run, so that a slow or silent client only ever holds its own thread.
// The connection's fd is closed after its thread was joined (never while it may run).
// A serve() that waits for requests may publish since when it has been idle (milliseconds
// of absl::Now(), 0 while busy); when the table is full, the connection idle the longest
// can then be closed to admit a new one (EvictIdlest), so idle clients cannot lock others
// out.
// Not thread-safe: the owning server's accept thread calls everything; the destructor
// wakes (shutdown) and joins every connection thread.
#ifndef KVSTRATA_DAEMON_COMMON_CONNECTION_THREADS_H_
#define KVSTRATA_DAEMON_COMMON_CONNECTION_THREADS_H_

#include <atomic>
#include <cstddef>
#include <functional>
#include <list>
#include <memory>
#include <thread>

#include "absl/time/time.h"

namespace kvstrata {

class ConnectionThreads {
 public:
  explicit ConnectionThreads(size_t max) : max_(max) {}
  ConnectionThreads(const ConnectionThreads&) = delete;
  ConnectionThreads& operator=(const ConnectionThreads&) = delete;
  ~ConnectionThreads() { StopAll(); }

  bool full() const { return connections_.size() >= max_; }
  size_t size() const { return connections_.size(); }
  using Serve = std::function<void(int fd, std::atomic<int64_t>* idle_since_ms)>;
  // Runs serve(fd, idle) on a new thread and takes the fd. False (fd left to the caller)
  // when no thread could be started.
  bool Start(int fd, Serve serve);
  // Shuts down (its serve() sees end of file) the connection idle the longest, if one has
  // been idle at least `min_idle`; true when one was. Its slot frees once it is reaped.
  bool EvictIdlest(absl::Duration min_idle);
  // Joins the connections whose serve() returned, and closes their fds.
  void ReapFinished();
  // Wakes every blocked read or write (shutdown), then joins and closes them all.
  void StopAll();

 private:
  struct Connection {
    int fd = -1;
    std::atomic<bool> done{false};
    std::atomic<bool> evicted{false};
    std::atomic<int64_t> idle_since_ms{0};
    std::thread thread;
  };
  const size_t max_;
  std::list<std::unique_ptr<Connection>> connections_;
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_COMMON_CONNECTION_THREADS_H_
