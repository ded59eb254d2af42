#include "daemon/server/tenant_servers.h"

#include <fcntl.h>
#include <grpcpp/server_builder.h>
#include <grpcpp/server_posix.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "daemon/common/unix_listener.h"
#include "spdlog/spdlog.h"

namespace kvstrata {

absl::StatusOr<std::unique_ptr<TenantServers>> TenantServers::Start(const ServiceContext& context) {
  const ServerConfig& config = context.config->server;
  absl::StatusOr<int> fd = ListenUnix(config.socket, config.socket_mode);
  if (!fd.ok()) return fd.status();
  std::unique_ptr<TenantServers> servers(new TenantServers(context, *fd));
  for (const Caller& caller : context.tenants->Tenants()) {
    if (absl::Status s = servers->StartTenant(caller); !s.ok()) {
      servers->Shutdown(absl::Now());
      return s;
    }
  }
  servers->accept_thread_ = std::thread([raw = servers.get()] { raw->AcceptLoop(); });
  return servers;
}

TenantServers::TenantServers(const ServiceContext& context, int listen_fd)
    : context_(context), listen_fd_(listen_fd) {}

TenantServers::~TenantServers() { Shutdown(absl::Now()); }

absl::Status TenantServers::StartTenant(const Caller& caller) {
  Tenant tenant;
  tenant.guard = std::make_unique<CallGuard>(context_.metrics, context_.tenants, caller);
  ServiceContext context = context_;
  context.guard = tenant.guard.get();
  tenant.control = std::make_unique<ControlService>(context);
  tenant.admin = std::make_unique<AdminService>(context);
  grpc::ServerBuilder builder;  // no listening port: connections come from AcceptLoop
  builder.RegisterService(tenant.control.get());
  builder.RegisterService(tenant.admin.get());
  const int max_bytes = static_cast<int>(context_.config->server.max_message_bytes);
  builder.SetMaxReceiveMessageSize(max_bytes);
  builder.SetMaxSendMessageSize(max_bytes);
  tenant.server = builder.BuildAndStart();
  if (tenant.server == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot start the gRPC server of tenant '", caller.namespace_scope, "'"));
  }
  if (grpc::HealthCheckServiceInterface* health = tenant.server->GetHealthCheckService()) {
    health->SetServingStatus(true);
  }
  tenants_.push_back(std::move(tenant));
  return absl::OkStatus();
}

void TenantServers::AcceptLoop() {
  while (!stop_.load()) {
    pollfd waiting{listen_fd_, POLLIN, 0};
    if (poll(&waiting, 1, 100) <= 0) continue;
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) Admit(fd);
  }
}

void TenantServers::Admit(int fd) {
  absl::StatusOr<Caller> caller = context_.tenants->ForConnection(fd);
  if (!caller.ok() || caller->tenant == kDefaultTenant || caller->tenant > tenants_.size()) {
    spdlog::warn("connection_refused socket=grpc reason=\"{}\"",
                 caller.ok() ? "no tenant" : std::string(caller.status().message()));
    close(fd);
    return;
  }
  // gRPC's endpoint expects a non-blocking socket; it owns the fd from here on.
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  grpc::AddInsecureChannelFromFd(tenants_[caller->tenant - 1].server.get(), fd);
}

void TenantServers::Shutdown(absl::Time deadline) {
  if (stop_.exchange(true)) return;
  if (accept_thread_.joinable()) accept_thread_.join();
  close(listen_fd_);
  unlink(context_.config->server.socket.c_str());
  for (Tenant& tenant : tenants_) {
    if (grpc::HealthCheckServiceInterface* health = tenant.server->GetHealthCheckService()) {
      health->SetServingStatus(false);
    }
    tenant.server->Shutdown(absl::ToChronoTime(deadline));
  }
  for (Tenant& tenant : tenants_) tenant.server->Wait();
}

}  // namespace kvstrata
