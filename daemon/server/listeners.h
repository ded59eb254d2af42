// Adds the configured listening ports to a gRPC ServerBuilder: the Unix socket when
// `with_unix` (a single-tenant daemon; a multi-tenant one accepts it itself, see
// TenantServers), TCP when server.tcp_address is set (TLS when a certificate is
// configured). Reads the TLS files; tokens are the TenantTable's.
#ifndef KVSTRATA_DAEMON_SERVER_LISTENERS_H_
#define KVSTRATA_DAEMON_SERVER_LISTENERS_H_

#include <grpcpp/server_builder.h>

#include <vector>

#include "absl/status/statusor.h"
#include "daemon/config/config.h"
#include "daemon/rpc/service_context.h"

namespace kvstrata {

// The listeners added, for the daemon's identity. INVALID_ARGUMENT when a TLS file cannot
// be read or is empty. `*unix_bound` (if given, and with_unix) becomes non-zero once
// BuildAndStart has bound the Unix socket: when BuildAndStart fails, it tells whether the
// socket or the TCP address (bound after it) failed. It must outlive BuildAndStart.
absl::StatusOr<std::vector<ListenerInfo>> AddListeners(const Config& config, bool with_unix,
                                                       grpc::ServerBuilder& builder,
                                                       int* unix_bound = nullptr);

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_SERVER_LISTENERS_H_
