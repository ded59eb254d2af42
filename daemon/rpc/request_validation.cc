#include "daemon/rpc/request_validation.h"

#include "absl/strings/str_cat.h"

namespace kvstrata {

absl::Status ValidateKeys(const google::protobuf::RepeatedPtrField<std::string>& keys,
                          absl::string_view field) {
  if (keys.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": at least one key is required"));
  }
  if (keys.size() > kMaxKeysPerCall) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", keys.size(), " keys, more than ",
                                                   kMaxKeysPerCall, " per call"));
  }
  for (int i = 0; i < keys.size(); ++i) {
    if (keys[i].empty() || keys[i].size() > kMaxKeyBytes) {
      return absl::InvalidArgumentError(absl::StrCat(field, "[", i, "] key is ", keys[i].size(),
                                                     " bytes; a key is 1..32 bytes"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<NamespaceInfo> RequireSessionNamespace(const ServiceContext& context,
                                                      uint64_t session_id,
                                                      uint32_t namespace_id) {
  if (absl::Status s = context.sessions->Check(session_id); !s.ok()) return s;
  std::optional<NamespaceInfo> info = context.namespaces->Find(namespace_id);
  if (!info.has_value()) {
    return absl::NotFoundError(absl::StrCat("namespace ", namespace_id, " is unknown"));
  }
  if (!context.namespaces->IsRegisteredBy(namespace_id, session_id)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "namespace ", namespace_id, " was not registered by session ", session_id));
  }
  return *info;
}

}  // namespace kvstrata
