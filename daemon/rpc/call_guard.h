// Runs one RPC handler body: admits the caller (token on TCP), records the call in the
// metrics sink, and maps the handler's absl::Status to gRPC. Handlers never throw.
// Thread-safe.
#ifndef KVSTRATA_DAEMON_RPC_CALL_GUARD_H_
#define KVSTRATA_DAEMON_RPC_CALL_GUARD_H_

#include <grpcpp/server_context.h>

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/metrics/metrics_sink.h"
#include "daemon/rpc/grpc_status.h"

namespace kvstrata {

class CallGuard {
 public:
  // `token` empty: no token is required. Unix-socket callers never need one (the
  // socket's file permissions are their access control).
  CallGuard(MetricsSink* metrics, std::string token)
      : metrics_(metrics), token_(std::move(token)) {}

  template <typename Body>
  grpc::Status Run(absl::string_view method, const grpc::ServerContextBase* context, Body&& body) {
    absl::Time start = absl::Now();
    absl::Status status = Admit(*context);
    if (status.ok()) status = body();
    metrics_->RecordRpc(method, absl::StatusCodeToString(status.code()), absl::Now() - start);
    return ToGrpcStatus(status);
  }

  absl::Status Admit(const grpc::ServerContextBase& context) const {
    if (token_.empty() || absl::StartsWith(context.peer(), "unix:")) return absl::OkStatus();
    auto range = context.client_metadata().equal_range("authorization");
    for (auto it = range.first; it != range.second; ++it) {
      if (absl::string_view(it->second.data(), it->second.size()) ==
          absl::StrCat("Bearer ", token_)) {
        return absl::OkStatus();
      }
    }
    return absl::UnauthenticatedError("a valid 'authorization: Bearer <token>' is required");
  }

 private:
  MetricsSink* metrics_;
  const std::string token_;
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_RPC_CALL_GUARD_H_
