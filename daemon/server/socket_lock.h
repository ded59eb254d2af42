// Exclusive ownership of a Unix socket path. An flock()ed "<socket>.lock" file proves a
// live daemon serves the path: a second daemon gets FAILED_PRECONDITION instead of
// stealing the socket, while a socket left behind by a crashed daemon is removed.
// Releasing (destruction) removes the socket and the lock file. Move-only.
#ifndef KVSTRATA_DAEMON_SERVER_SOCKET_LOCK_H_
#define KVSTRATA_DAEMON_SERVER_SOCKET_LOCK_H_

#include <string>

#include "absl/status/statusor.h"

namespace kvstrata {

class SocketLock {
 public:
  // Creates the socket's directory (mode 0750) when missing.
  static absl::StatusOr<SocketLock> Acquire(const std::string& socket_path);

  SocketLock(SocketLock&& other) noexcept;
  SocketLock& operator=(SocketLock&& other) noexcept;
  SocketLock(const SocketLock&) = delete;
  SocketLock& operator=(const SocketLock&) = delete;
  ~SocketLock();

 private:
  SocketLock(std::string socket_path, int fd) : socket_path_(std::move(socket_path)), fd_(fd) {}
  void Release();

  std::string socket_path_;
  int fd_ = -1;
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_SERVER_SOCKET_LOCK_H_
