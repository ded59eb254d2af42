// Adds the configured listening ports to a gRPC ServerBuilder: the Unix socket always,
// TCP when server.tcp_address is set (TLS when a certificate is configured). Reads the
// TLS and token files.
#ifndef KVSTRATA_DAEMON_SERVER_LISTENERS_H_
#define KVSTRATA_DAEMON_SERVER_LISTENERS_H_

#include <grpcpp/server_builder.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/config/config.h"
#include "daemon/rpc/service_context.h"

namespace kvstrata {

struct ListenerSetup {
  std::vector<ListenerInfo> listeners;
  std::string token;  // Required bearer token on TCP; empty when none.
};

// INVALID_ARGUMENT when a TLS or token file cannot be read or is empty.
absl::StatusOr<ListenerSetup> AddListeners(const ServerConfig& config,
                                           grpc::ServerBuilder& builder);

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_SERVER_LISTENERS_H_
