// The one SubmitStore / SubmitLoad: what Control.SubmitStore / Control.SubmitLoad (gRPC)
// and the fast-path socket's job frames (FastPathServer) both run after decoding their
// request. Checks the session and namespace (RequireSessionNamespace) and the blocks
// (JobBlocks: keys as ValidateKeys, one block id per key), in that order, then hands the
// job to the JobManager, which answers at once (it never waits for copies or disks). The
// job's completion goes to `sink` when one is given (a fast-path connection's), else to the
// session's completion queue.
// Returns the job id. Thread-safe (as JobManager is).
#ifndef KVSTRATA_DAEMON_RPC_JOB_CALL_H_
#define KVSTRATA_DAEMON_RPC_JOB_CALL_H_

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "daemon/common/ids.h"
#include "daemon/jobs/job_manager.h"
#include "daemon/rpc/service_context.h"

namespace kvstrata {

struct JobCall {
  enum class Kind { kStore, kLoad };
  Kind kind = Kind::kLoad;
  TenantId tenant = kDefaultTenant;  // the caller's (the session must be this tenant's)
  SessionId session_id = 0;
  uint32_t namespace_id = 0;
  uint64_t registration_id = 0;
  absl::Span<const std::string_view> keys;  // Not owned; valid during the call.
  absl::Span<const uint32_t> block_ids;     // Same length as keys.
  uint32_t wait_event = 0;                  // Stores: 1 + event index; 0 = no wait.
  uint64_t lease_id = 0;                    // Loads: 0 = none.
  uint32_t layer_flag_value = 0;            // Loads: layer-wise when > 0.
  SinkPtr sink;                             // Where the completion goes; null = the queue.
};

absl::StatusOr<uint64_t> RunSubmitJob(const ServiceContext& context, const JobCall& call);

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_RPC_JOB_CALL_H_
