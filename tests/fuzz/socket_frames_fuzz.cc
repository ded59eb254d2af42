// libFuzzer target: any bytes on the daemon's own sockets — the fast path (lookup
// and job frames, daemon/rpc/fast_path/lookup_wire.h and job_wire.h) and the shared-memory fd
// protocol — against a live FastPathServer and FdServer (tests/fuzz/fuzz_daemon.h).
// Byte 0 picks the socket (bit 0: fd socket) and whether the input is aimed at the live
// session and namespace (bit 1); the rest is sent, the write side shut, and the answer
// read to the end. A crash, a hang past the frame timeout or a sanitizer report fails.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "tests/fuzz/fuzz_daemon.h"

namespace {

void Exchange(const std::string& path, const std::string& bytes) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  timeval timeout{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    size_t sent = 0;
    while (sent < bytes.size()) {
      ssize_t n = send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) break;
      sent += static_cast<size_t>(n);
    }
    shutdown(fd, SHUT_WR);
    char answer[4096];
    msghdr message{};
    iovec io{answer, sizeof(answer)};
    message.msg_iov = &io;
    message.msg_iovlen = 1;
    char control[CMSG_SPACE(sizeof(int))];
    message.msg_control = control;
    message.msg_controllen = sizeof(control);
    while (recvmsg(fd, &message, MSG_CMSG_CLOEXEC) > 0) {
      for (cmsghdr* c = CMSG_FIRSTHDR(&message); c != nullptr; c = CMSG_NXTHDR(&message, c)) {
        if (c->cmsg_type == SCM_RIGHTS) {
          int passed = -1;
          std::memcpy(&passed, CMSG_DATA(c), sizeof(int));
          close(passed);
        }
      }
      message.msg_controllen = sizeof(control);
    }
  }
  close(fd);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  kvstrata::FuzzDaemon& d = kvstrata::FuzzDaemon::Get();
  const bool fd_socket = (data[0] & 1) != 0;
  std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  if ((data[0] & 2) != 0) {
    // Lookup and job frames: session id at 8, namespace id at 16; fd protocol: at 0.
    if (fd_socket) {
      kvstrata::AimAtLiveSession(bytes, 0, 0);
    } else {
      kvstrata::AimAtLiveSession(bytes, 8, 16);
    }
  }
  Exchange(fd_socket ? d.context.shm_fd_socket : d.context.lookup_socket, bytes);
  return 0;
}
