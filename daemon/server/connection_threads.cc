#include "daemon/server/connection_threads.h"

#include <sys/socket.h>
#include <unistd.h>

#include <system_error>
#include <utility>

#include "spdlog/spdlog.h"

namespace kvstrata {

bool ConnectionThreads::Start(int fd, std::function<void(int)> serve) {
  auto connection = std::make_unique<Connection>();
  connection->fd = fd;
  Connection* raw = connection.get();
  try {
    raw->thread = std::thread([raw, serve = std::move(serve)] {
      serve(raw->fd);
      raw->done.store(true);
    });
  } catch (const std::system_error& e) {
    spdlog::error("connection_refused reason=\"no thread: {}\"", e.what());
    return false;
  }
  connections_.push_back(std::move(connection));
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
