// One thread per accepted connection, at most `max` at once: what the fd server and the
// lookup socket both run, so that a slow or silent client only ever holds its own thread.
// The connection's fd is closed after its thread was joined (never while it may run).
// Not thread-safe: the owning server's accept thread calls everything; the destructor
// wakes (shutdown) and joins every connection thread.
#ifndef KVSTRATA_DAEMON_SERVER_CONNECTION_THREADS_H_
#define KVSTRATA_DAEMON_SERVER_CONNECTION_THREADS_H_

#include <atomic>
#include <cstddef>
#include <functional>
#include <list>
#include <memory>
#include <thread>

namespace kvstrata {

class ConnectionThreads {
 public:
  explicit ConnectionThreads(size_t max) : max_(max) {}
  ConnectionThreads(const ConnectionThreads&) = delete;
  ConnectionThreads& operator=(const ConnectionThreads&) = delete;
  ~ConnectionThreads() { StopAll(); }

  bool full() const { return connections_.size() >= max_; }
  size_t size() const { return connections_.size(); }
  // Runs serve(fd) on a new thread and takes the fd. False (fd left to the caller) when
  // no thread could be started.
  bool Start(int fd, std::function<void(int)> serve);
  // Joins the connections whose serve() returned, and closes their fds.
  void ReapFinished();
  // Wakes every blocked read or write (shutdown), then joins and closes them all.
  void StopAll();

 private:
  struct Connection {
    int fd = -1;
    std::atomic<bool> done{false};
    std::thread thread;
  };
  const size_t max_;
  std::list<std::unique_ptr<Connection>> connections_;
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_SERVER_CONNECTION_THREADS_H_
