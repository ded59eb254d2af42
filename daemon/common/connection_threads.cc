#include "daemon/common/connection_threads.h"

#include <sys/socket.h>
#include <unistd.h>

#include <system_error>

#include <utility>
#include "absl/time/clock.h"

#include "spdlog/spdlog.h"

namespace kvstrata {

bool ConnectionThreads::Start(int fd, Serve serve) {
  auto connection = std::make_unique<Connection>();
  connection->fd = fd;
  Connection* raw = connection.get();
  try {
    raw->thread = std::thread([raw, serve = std::move(serve)] {
      serve(raw->fd, &raw->idle_since_ms);
      shutdown(raw->fd, SHUT_RDWR);  // The peer sees the end now; the fd closes when reaped.
      raw->done.store(true);
    });
  } catch (const std::system_error& e) {
    spdlog::error("connection_refused reason=\"no thread: {}\"", e.what());
    return false;
  }
  connections_.push_back(std::move(connection));
  return true;
}

bool ConnectionThreads::EvictIdlest(absl::Duration min_idle) {
  const int64_t latest = absl::ToUnixMillis(absl::Now() - min_idle);
  Connection* idlest = nullptr;
  for (auto& c : connections_) {
    int64_t since = c->idle_since_ms.load();
    if (since == 0 || since > latest || c->done.load() || c->evicted.load()) continue;
    if (idlest == nullptr || since < idlest->idle_since_ms.load()) idlest = c.get();
  }
  if (idlest == nullptr) return false;
  idlest->evicted.store(true);
  shutdown(idlest->fd, SHUT_RDWR);  // Its blocked read returns 0: serve() ends.
  return true;
}

void ConnectionThreads::ReapFinished() {
  for (auto it = connections_.begin(); it != connections_.end();) {
    if (!(*it)->done.load()) {
      ++it;
      continue;
    }
    (*it)->thread.join();
    close((*it)->fd);
    it = connections_.erase(it);
  }
}

void ConnectionThreads::StopAll() {
  for (auto& c : connections_) shutdown(c->fd, SHUT_RDWR);  // Wakes blocked reads.
  for (auto& c : connections_) {
    c->thread.join();
    close(c->fd);
  }
  connections_.clear();
}

}  // namespace kvstrata
