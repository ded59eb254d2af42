#include "daemon/session/process_fence.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <utility>

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77  // Linux 6.5+, asm-generic value; older kernels answer ENOPROTOOPT.
#endif

namespace kvstrata {

ProcessFence::~ProcessFence() {
  MutexLock lock(&mu_);
  for (auto& [session, fds] : pidfds_) {
    for (int fd : fds) {
      if (fd >= 0) close(fd);
    }
  }
}

int ProcessFence::PeerPidfd(int connection) {
  int pidfd = -1;
  socklen_t length = sizeof(pidfd);
  // The pidfd names the peer process itself, in any pid namespace (a client pod's pid is
  // 0 in SO_PEERCRED when the daemon's namespace cannot see it).
  if (getsockopt(connection, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &length) == 0 && pidfd >= 0) {
    return pidfd;
  }
  ucred peer{};
  length = sizeof(peer);
  if (getsockopt(connection, SOL_SOCKET, SO_PEERCRED, &peer, &length) != 0 || peer.pid <= 0) {
    return -1;
  }
  // The peer still holds its end of the connection, so the pid is not yet reused.
  long fd = syscall(SYS_pidfd_open, peer.pid, 0);
  return fd >= 0 ? static_cast<int>(fd) : -1;
}

bool ProcessFence::Running(int pidfd) {
  if (pidfd < 0) return true;  // Unknown peer: assume it may still write.
  pollfd exited{pidfd, POLLIN, 0};
  int ready = poll(&exited, 1, 0);
  return !(ready > 0 && (exited.revents & (POLLIN | POLLHUP | POLLERR)) != 0);
}

void ProcessFence::Track(uint64_t session, int pidfd) {
  MutexLock lock(&mu_);
  pidfds_[session].push_back(pidfd);
}

bool ProcessFence::MayWrite(uint64_t session) const {
  MutexLock lock(&mu_);
  auto it = pidfds_.find(session);
  if (it == pidfds_.end()) return false;
  for (int fd : it->second) {
    if (Running(fd)) return true;
  }
  return false;
}

void ProcessFence::Forget(uint64_t session) {
  std::vector<int> fds;
  {
    MutexLock lock(&mu_);
    auto it = pidfds_.find(session);
    if (it == pidfds_.end()) return;
    fds = std::move(it->second);
    pidfds_.erase(it);
  }
  for (int fd : fds) {
    if (fd >= 0) close(fd);
  }
}

std::vector<uint64_t> ProcessFence::Exited() {
  std::vector<uint64_t> exited;
  std::vector<int> to_close;
  {
    MutexLock lock(&mu_);
    for (auto it = pidfds_.begin(); it != pidfds_.end();) {
      bool running = false;
      for (int fd : it->second) running = running || Running(fd);
      if (running) {
        ++it;
        continue;
      }
      exited.push_back(it->first);
      to_close.insert(to_close.end(), it->second.begin(), it->second.end());
      pidfds_.erase(it++);
    }
  }
  for (int fd : to_close) close(fd);
  return exited;
}

size_t ProcessFence::size() const {
  MutexLock lock(&mu_);
  return pidfds_.size();
}

}  // namespace kvstrata
