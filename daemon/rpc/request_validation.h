// Checks shared by the RPC handlers. Each returns INVALID_ARGUMENT / NOT_FOUND /
// FAILED_PRECONDITION with a message naming the field.
#ifndef KVSTRATA_DAEMON_RPC_REQUEST_VALIDATION_H_
#define KVSTRATA_DAEMON_RPC_REQUEST_VALIDATION_H_

#include <google/protobuf/repeated_ptr_field.h>

#include <string>

#include "absl/status/statusor.h"
#include "daemon/rpc/service_context.h"

namespace kvstrata {

inline constexpr size_t kMaxKeyBytes = 32;
inline constexpr int kMaxKeysPerCall = 65536;

// Each key 1..32 bytes; 1..kMaxKeysPerCall keys.
// `field` names the request field in messages.
absl::Status ValidateKeys(const google::protobuf::RepeatedPtrField<std::string>& keys,
                          absl::string_view field = "keys");

// The session exists, and the namespace exists and was registered by that session.
absl::StatusOr<NamespaceInfo> RequireSessionNamespace(const ServiceContext& context,
                                                      uint64_t session_id,
                                                      uint32_t namespace_id);

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_RPC_REQUEST_VALIDATION_H_
