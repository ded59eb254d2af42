// Hands the shared-memory region's file descriptor to host-mode clients (SCM_RIGHTS) on a
// Unix stream socket beside the gRPC socket. Protocol (proto/kvstrata/v1/control.proto):
// the client sends its session id (8 bytes little-endian); a live session of the peer's
// tenant (TenantTable::ForConnection) that may map a partition of the region
// (MappedPartition: its own, else partition 0 when shared_memory) gets that partition's size
// (8 bytes little-endian) with its fd attached; any other a size of 0 and no fd; then the
// connection closes. Before answering, the peer process (its pidfd) is recorded in the ProcessFence
// under the session, so that the slots of that session outlive it while the process may still write
// them. One accept thread hands each connection to a thread of its own (at most kMaxConnections at
// once; a connection beyond that first closes the one that has waited longest for its session id,
// and is closed itself only when none is waiting), and each exchange is bounded by a 2 s timeout,
// so silent clients never delay a good one. Thread-safe; Stop is idempotent and joins every
// connection thread.
#ifndef KVSTRATA_DAEMON_SERVER_FD_SERVER_H_
#define KVSTRATA_DAEMON_SERVER_FD_SERVER_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "daemon/common/connection_threads.h"
#include "daemon/pool/shm_region.h"
#include "daemon/session/process_fence.h"
#include "daemon/session/session_registry.h"
#include "daemon/session/tenant_table.h"

namespace kvstrata {

class FdServer {
 public:
  static constexpr size_t kMaxConnections = 1024;

  // Listens on `path` (a stale file there is replaced) with permissions `mode`.
  static absl::StatusOr<std::unique_ptr<FdServer>> Start(const std::string& path, uint32_t mode,
                                                         const ShmRegion* region,
                                                         const SessionRegistry* sessions,
                                                         const TenantTable* tenants,
                                                         ProcessFence* fence);
  ~FdServer();
  void Stop();

 private:
  FdServer(std::string path, int listen_fd, const ShmRegion* region,
           const SessionRegistry* sessions, const TenantTable* tenants, ProcessFence* fence);
  void AcceptLoop();
  // Serves one connection; `idle_since_ms` (ConnectionThreads) says since when it waits for
  // the session id (0 once it arrived).
  void Serve(int connection, std::atomic<int64_t>* idle_since_ms) const;

  const std::string path_;
  const int listen_fd_;
  const ShmRegion* const region_;
  const SessionRegistry* const sessions_;
  const TenantTable* const tenants_;
  ProcessFence* const fence_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  ConnectionThreads connections_{kMaxConnections};  // The accept thread's only.
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_SERVER_FD_SERVER_H_
