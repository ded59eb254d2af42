#include "daemon/rpc/request_validation.h"

#include "absl/strings/str_cat.h"

namespace kvstrata {

absl::Status ValidateKeyCount(size_t count, absl::string_view field) {
  if (count == 0) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": at least one key is required"));
  }
  if (count > static_cast<size_t>(kMaxKeysPerCall)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", count, " keys, more than ", kMaxKeysPerCall, " per call"));
  }
  return absl::OkStatus();
}

absl::Status ValidateKeySize(size_t bytes, size_t index, absl::string_view field) {
  if (bytes == 0 || bytes > kMaxKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, "[", index, "] key is ", bytes, " bytes; a key is 1..32 bytes"));
  }
  return absl::OkStatus();
}

absl::Status ValidateKeys(const google::protobuf::RepeatedPtrField<std::string>& keys,
                          absl::string_view field) {
  if (absl::Status s = ValidateKeyCount(static_cast<size_t>(keys.size()), field); !s.ok()) {
    return s;
  }
  for (int i = 0; i < keys.size(); ++i) {
    if (absl::Status s = ValidateKeySize(keys[i].size(), static_cast<size_t>(i), field); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateKeys(absl::Span<const std::string_view> keys, absl::string_view field) {
  if (absl::Status s = ValidateKeyCount(keys.size(), field); !s.ok()) return s;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (absl::Status s = ValidateKeySize(keys[i].size(), i, field); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<NamespaceInfo> RequireSessionNamespace(const ServiceContext& context,
                                                      TenantId tenant, SessionId session_id,
                                                      uint32_t namespace_id) {
  if (absl::Status s = context.sessions->Check(session_id, tenant); !s.ok()) return s;
  std::optional<NamespaceInfo> info = context.namespaces->Find(namespace_id);
  if (!info.has_value()) {
    return absl::NotFoundError(absl::StrCat("namespace ", namespace_id, " is unknown"));
  }
  if (!context.namespaces->IsRegisteredBy(namespace_id, session_id)) {
    return absl::FailedPreconditionError(
        absl::StrCat("namespace ", namespace_id, " was not registered by session ", session_id));
  }
  return *info;
}

absl::StatusOr<HostModeNamespace> RequireHostModeNamespace(const ServiceContext& context,
                                                           const Caller& caller,
                                                           SessionId session_id,
                                                           uint32_t namespace_id) {
  absl::StatusOr<NamespaceInfo> ns =
      RequireSessionNamespace(context, caller.tenant, session_id, namespace_id);
  if (!ns.ok()) return ns.status();
  size_t partition = context.cache->PartitionOf(ns->id);
  std::optional<uint32_t> mapped = MappedPartition(caller);
  if (!mapped.has_value() || *mapped != partition) {
    return absl::PermissionDeniedError(
        "host-mode store and load need the shared region, and this tenant may not map the L1 "
        "partition of this namespace (see tenants[].l1_capacity and shared_memory); use the GPU "
        "path (register_cuda_kv_caches) instead");
  }
  return HostModeNamespace{*std::move(ns), context.cache->partition(partition).base_offset};
}

}  // namespace kvstrata
