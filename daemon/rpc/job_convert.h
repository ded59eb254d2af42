// Conversions between wire messages and job / transfer types.
#ifndef KVSTRATA_DAEMON_RPC_JOB_CONVERT_H_
#define KVSTRATA_DAEMON_RPC_JOB_CONVERT_H_

#include "absl/status/statusor.h"
#include "daemon/jobs/job_manager.h"
#include "kvstrata/v1/control.pb.h"

namespace kvstrata {

// INVALID_ARGUMENT for handles that are not 64 bytes, no tensors, more than 65536
// tensors or 64 events, or an empty GPU uuid. Geometry is checked by the engine.
absl::StatusOr<CudaMemorySpec> FromProto(const v1::CudaKvMemory& proto);
// Views into `blocks`; valid while the request lives.
// The blocks of a SubmitStore/SubmitLoad request, given as `blocks` or as the parallel
// `keys`/`block_ids` arrays (views into the request). INVALID_ARGUMENT for both forms at
// once; the lengths and the keys are RunSubmitJob's to check.
absl::StatusOr<JobBlocks> JobBlocksFrom(
    const google::protobuf::RepeatedPtrField<v1::BlockTransfer>& blocks,
    const google::protobuf::RepeatedPtrField<std::string>& keys,
    const google::protobuf::RepeatedField<uint32_t>& block_ids);
template <typename Request>
absl::StatusOr<JobBlocks> JobBlocksFromRequest(const Request& request) {
  return JobBlocksFrom(request.blocks(), request.keys(), request.block_ids());
}
void ToProto(const JobCompletion& completion, v1::JobCompletion* out);

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_RPC_JOB_CONVERT_H_
