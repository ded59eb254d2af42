// The Unix socket of a multi-tenant daemon. gRPC cannot tell who is on the other end of a
// Unix socket, so this accepts the connections itself, admits each by its peer credentials
// (TenantTable::ForConnection: a peer no tenant claims is closed at once and logged) and
// hands it to the gRPC server of its tenant, whose services see that tenant as the caller
// of every call on it. One thread accepts; each tenant's server has gRPC's own threads.
// Thread-safe; Shutdown once, before what `context` points to goes.
#ifndef KVSTRATA_DAEMON_SERVER_TENANT_SERVERS_H_
#define KVSTRATA_DAEMON_SERVER_TENANT_SERVERS_H_

#include <grpcpp/server.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/rpc/admin_service.h"
#include "daemon/rpc/call_guard.h"
#include "daemon/rpc/control_service.h"
#include "daemon/rpc/service_context.h"

namespace kvstrata {

class TenantServers {
 public:
  // `context` is shared by every tenant's services (its guard is replaced by each tenant's
  // own). UNAVAILABLE when the socket cannot be bound or a server cannot start.
  static absl::StatusOr<std::unique_ptr<TenantServers>> Start(const ServiceContext& context);
  ~TenantServers();

  // Stops accepting, then shuts every tenant's server down (calls still running after
  // `deadline` are cancelled).
  void Shutdown(absl::Time deadline);

 private:
  struct Tenant {
    std::unique_ptr<CallGuard> guard;
    std::unique_ptr<ControlService> control;
    std::unique_ptr<AdminService> admin;
    std::unique_ptr<grpc::Server> server;
  };
  TenantServers(const ServiceContext& context, int listen_fd);
  absl::Status StartTenant(const Caller& caller);
  void AcceptLoop();
  void Admit(int fd);

  const ServiceContext context_;
  const int listen_fd_;
  std::vector<Tenant> tenants_;  // index = TenantId - 1
  std::atomic<bool> stop_{false};
  std::thread accept_thread_;
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_SERVER_TENANT_SERVERS_H_
