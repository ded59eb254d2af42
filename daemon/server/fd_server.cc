#include "daemon/server/fd_server.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include <endian.h>
#include "absl/time/clock.h"
#include "daemon/common/unix_listener.h"
#include "spdlog/spdlog.h"

namespace kvstrata {
namespace {

bool ReadExactly(int fd, void* data, size_t size) {
  auto* bytes = static_cast<char*>(data);
  while (size > 0) {
    ssize_t n = read(fd, bytes, size);
    if (n <= 0) return false;
    bytes += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

void SendSize(int connection, uint64_t size, int fd_to_pass) {
  uint64_t wire = htole64(size);
  iovec io{&wire, sizeof(wire)};
  msghdr message{};
  message.msg_iov = &io;
  message.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (fd_to_pass >= 0) {
    message.msg_control = control;
    message.msg_controllen = sizeof(control);
    cmsghdr* header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(header), &fd_to_pass, sizeof(int));
  }
  (void)!sendmsg(connection, &message, MSG_NOSIGNAL);
}

}  // namespace

absl::StatusOr<std::unique_ptr<FdServer>> FdServer::Start(const std::string& path, uint32_t mode,
                                                          const ShmRegion* region,
                                                          const SessionRegistry* sessions,
                                                          const TenantTable* tenants,
                                                          ProcessFence* fence) {
  absl::StatusOr<int> fd = ListenUnix(path, mode);
  if (!fd.ok()) return fd.status();
  std::unique_ptr<FdServer> server(new FdServer(path, *fd, region, sessions, tenants, fence));
  server->thread_ = std::thread([raw = server.get()] { raw->AcceptLoop(); });
  return server;
}

FdServer::FdServer(std::string path, int listen_fd, const ShmRegion* region,
                   const SessionRegistry* sessions, const TenantTable* tenants, ProcessFence* fence)
    : path_(std::move(path)),
      listen_fd_(listen_fd),
      region_(region),
      sessions_(sessions),
      tenants_(tenants),
      fence_(fence) {}

FdServer::~FdServer() { Stop(); }

void FdServer::Stop() {
  if (stop_.exchange(true)) return;
  if (thread_.joinable()) thread_.join();  // It stops the connection threads last.
  close(listen_fd_);
  unlink(path_.c_str());
}

void FdServer::AcceptLoop() {
  while (!stop_.load()) {
    connections_.ReapFinished();
    pollfd waiting{listen_fd_, POLLIN, 0};
    if (poll(&waiting, 1, 100) <= 0) continue;
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    // Full: close the connection that has waited longest for its session id, so silent
    // clients cannot lock a good one out; refuse only when every one is mid-answer.
    if (connections_.full() && !connections_.EvictIdlest(absl::ZeroDuration())) {
      spdlog::warn("shm_fd_refused reason=\"{} connections open\"", connections_.size());
      close(fd);
      continue;
    }
    if (!connections_.Start(fd, [this](int connection, std::atomic<int64_t>* idle_since_ms) {
          Serve(connection, idle_since_ms);
        })) {
      close(fd);
    }
  }
  connections_.StopAll();
}

void FdServer::Serve(int connection, std::atomic<int64_t>* idle_since_ms) const {
  timeval timeout{2, 0};
  setsockopt(connection, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  setsockopt(connection, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  idle_since_ms->store(absl::ToUnixMillis(absl::Now()));  // evictable until the id arrives
  uint64_t wire = 0;
  const bool got = ReadExactly(connection, &wire, sizeof(wire));
  idle_since_ms->store(0);
  if (!got) return;
  uint64_t session = le64toh(wire);
  absl::StatusOr<Caller> caller = tenants_->ForConnection(connection);
  std::optional<uint32_t> partition;
  if (caller.ok()) partition = MappedPartition(*caller);
  if (!partition.has_value()) {
    spdlog::warn(
        "shm_fd_refused session={} reason=\"{}\"", session,
        caller.ok()
            ? std::string("this tenant has no L1 partition it may map (l1_capacity, shared_memory)")
            : std::string(caller.status().message()));
    SendSize(connection, 0, -1);
    return;
  }
  // Check, fence, check again: if the session ends after the second check, its end sees
  // the fence; if it ended before, no descriptor is sent.
  bool live = sessions_->Check(session, caller->tenant).ok();
  if (live) {
    fence_->Track(session, ProcessFence::PeerPidfd(connection));
    live = sessions_->Check(session, caller->tenant).ok();
  }
  if (!live) {
    spdlog::warn("shm_fd_refused session={} reason=\"unknown session\"", session);
    SendSize(connection, 0, -1);
    return;
  }
  SendSize(connection, region_->partition_size(*partition), region_->partition_fd(*partition));
}

}  // namespace kvstrata
