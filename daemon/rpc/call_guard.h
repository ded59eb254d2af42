// Runs one RPC handler body: admits the caller (it learns which tenant calls: see
// TenantTable), records the call in the metrics sink, and maps the handler's absl::Status
// to gRPC. A body taking `const Caller&` is given the admitted caller. Handlers never
// throw. Thread-safe.
#ifndef KVSTRATA_DAEMON_RPC_CALL_GUARD_H_
#define KVSTRATA_DAEMON_RPC_CALL_GUARD_H_

#include <grpcpp/server_context.h>

#include <optional>
#include <string_view>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "daemon/metrics/metrics_sink.h"
#include "daemon/rpc/grpc_status.h"
#include "daemon/session/caller.h"
#include "daemon/session/tenant_table.h"

namespace kvstrata {

class CallGuard {
 public:
  // `fixed`: every call this guard sees comes from that caller (the gRPC server of one
  // tenant, whose Unix-socket connections were admitted by their peer credentials).
  // Otherwise a Unix-socket caller is the default tenant (single-tenant daemons only) and a
  // TCP caller is whoever its 'authorization: Bearer <token>' names. `tenants` outlives us.
  CallGuard(MetricsSink* metrics, const TenantTable* tenants,
            std::optional<Caller> fixed = std::nullopt)
      : metrics_(metrics), tenants_(tenants), fixed_(std::move(fixed)) {}

  template <typename Body>
  grpc::Status Run(absl::string_view method, const grpc::ServerContextBase* context, Body&& body) {
    absl::Time start = absl::Now();
    absl::StatusOr<Caller> caller = Admit(*context);
    absl::Status status = caller.status();
    if (status.ok()) {
      if constexpr (std::is_invocable_v<Body, const Caller&>) {
        status = body(*caller);
      } else {
        status = body();
      }
    }
    metrics_->RecordRpc(method, absl::StatusCodeToString(status.code()), absl::Now() - start);
    return ToGrpcStatus(status);
  }

  // UNAUTHENTICATED for a TCP caller without a known token, PERMISSION_DENIED for a Unix
  // peer of a multi-tenant daemon that reached a server without a fixed caller.
  absl::StatusOr<Caller> Admit(const grpc::ServerContextBase& context) const;

 private:
  MetricsSink* metrics_;
  const TenantTable* tenants_;
  const std::optional<Caller> fixed_;
};

// PERMISSION_DENIED unless `caller` may run admin operations.
absl::Status RequireAdmin(const Caller& caller, absl::string_view what);

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_RPC_CALL_GUARD_H_
