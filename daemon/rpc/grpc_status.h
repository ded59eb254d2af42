// The one mapping from absl::Status to grpc::Status (the code numbers are the same).
#ifndef KVSTRATA_DAEMON_RPC_GRPC_STATUS_H_
#define KVSTRATA_DAEMON_RPC_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include <string>

#include "absl/status/status.h"

namespace kvstrata {

inline grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_RPC_GRPC_STATUS_H_
