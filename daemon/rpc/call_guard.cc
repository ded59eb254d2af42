#include "daemon/rpc/call_guard.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace kvstrata {

absl::StatusOr<Caller> CallGuard::Admit(const grpc::ServerContextBase& context) const {
  if (fixed_.has_value()) return *fixed_;
  if (absl::StartsWith(context.peer(), "unix:")) {
    if (std::optional<Caller> caller = tenants_->ForPeer(0, 0); !tenants_->multi_tenant()) {
      return *caller;  // single-tenant: the socket's file permissions are the access control
    }
    return absl::PermissionDeniedError("this connection was not admitted by peer credentials");
  }
  std::string_view token;
  auto range = context.client_metadata().equal_range("authorization");
  for (auto it = range.first; it != range.second; ++it) {
    std::string_view value(it->second.data(), it->second.size());
    if (value.starts_with("Bearer ")) token = value.substr(7);
  }
  if (std::optional<Caller> caller = tenants_->ForToken(token); caller.has_value()) {
    return *caller;
  }
  return absl::UnauthenticatedError("a valid 'authorization: Bearer <token>' is required");
}

absl::Status RequireAdmin(const Caller& caller, absl::string_view what) {
  if (caller.admin) return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrCat(what, " is an admin operation; this tenant is not an admin"));
}

}  // namespace kvstrata
