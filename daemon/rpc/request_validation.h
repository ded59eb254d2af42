// Checks shared by the RPC handlers and the fast path. Each returns
// INVALID_ARGUMENT / NOT_FOUND / FAILED_PRECONDITION with a message naming the field.
#ifndef KVSTRATA_DAEMON_RPC_REQUEST_VALIDATION_H_
#define KVSTRATA_DAEMON_RPC_REQUEST_VALIDATION_H_

#include <google/protobuf/repeated_ptr_field.h>

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "daemon/rpc/service_context.h"

namespace kvstrata {

inline constexpr size_t kMaxKeyBytes = 32;
inline constexpr int kMaxKeysPerCall = 65536;

// 1..kMaxKeysPerCall keys.
absl::Status ValidateKeyCount(size_t count, absl::string_view field = "keys");
// Key number `index` is 1..kMaxKeyBytes bytes.
absl::Status ValidateKeySize(size_t bytes, size_t index, absl::string_view field = "keys");

// Each key 1..32 bytes; 1..kMaxKeysPerCall keys.
// `field` names the request field in messages.
absl::Status ValidateKeys(const google::protobuf::RepeatedPtrField<std::string>& keys,
                          absl::string_view field = "keys");
absl::Status ValidateKeys(absl::Span<const std::string_view> keys,
                          absl::string_view field = "keys");

// The session exists and is `tenant`'s, and the namespace exists and was registered by
// that session.
absl::StatusOr<NamespaceInfo> RequireSessionNamespace(const ServiceContext& context,
                                                      TenantId tenant, SessionId session_id,
                                                      uint32_t namespace_id);

// Host-mode calls (ReserveStore, AcquireLoad): RequireSessionNamespace, and `caller`'s
// clients may map the L1 partition holding the namespace (MappedPartition; else
// PERMISSION_DENIED). `base`: where that partition starts in the region.
struct HostModeNamespace {
  NamespaceInfo ns;
  uint64_t base = 0;
};
absl::StatusOr<HostModeNamespace> RequireHostModeNamespace(const ServiceContext& context,
                                                           const Caller& caller,
                                                           SessionId session_id,
                                                           uint32_t namespace_id);

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_RPC_REQUEST_VALIDATION_H_
