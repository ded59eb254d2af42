#include "daemon/rpc/job_call.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "daemon/rpc/lease_adoption.h"
#include "daemon/rpc/request_validation.h"

namespace kvstrata {
absl::StatusOr<uint64_t> RunSubmitJob(const ServiceContext& context, const JobCall& call) {
  absl::StatusOr<NamespaceInfo> ns =
      RequireSessionNamespace(context, call.tenant, call.session_id, call.namespace_id);
  if (!ns.ok()) return ns.status();
  if (call.keys.size() != call.block_ids.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "keys has ", call.keys.size(), " entries but block_ids has ", call.block_ids.size()));
  }
  if (absl::Status s = ValidateKeys(call.keys, "keys"); !s.ok()) return s;
  JobBlocks blocks;
  blocks.keys.assign(call.keys.begin(), call.keys.end());
  blocks.block_ids.assign(call.block_ids.begin(), call.block_ids.end());
  if (call.kind == JobCall::Kind::kStore) {
    std::optional<uint32_t> wait_event;
    if (call.wait_event != 0) wait_event = call.wait_event - 1;
    return context.jobs->SubmitStore(call.session_id, ns->id, ns->bytes_per_block,
                                     call.registration_id, blocks, wait_event, call.sink);
  }
  std::optional<LeaseId> lease;
  if (call.lease_id != 0) {
    absl::StatusOr<bool> usable = AdoptLease(context, call.tenant, call.session_id, call.lease_id);
    if (!usable.ok()) return usable.status();
    if (*usable) lease = call.lease_id;
  }
  std::optional<uint64_t> layer_flag_value;
  if (call.layer_flag_value != 0) layer_flag_value = call.layer_flag_value;
  return context.jobs->SubmitLoad(call.session_id, ns->id, call.registration_id, blocks, lease,
                                  layer_flag_value, call.sink);
}

}  // namespace kvstrata
