#include "daemon/rpc/job_convert.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace kvstrata {
namespace {

constexpr int kMaxIpcEvents = 64;

absl::StatusOr<IpcHandleBytes> Handle(const std::string& bytes, absl::string_view field) {
  if (bytes.size() != kCudaIpcHandleBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " is ", bytes.size(), " bytes; a CUDA IPC handle is 64 bytes"));
  }
  IpcHandleBytes handle;
  std::copy(bytes.begin(), bytes.end(), handle.begin());
  return handle;
}

}  // namespace

absl::StatusOr<CudaMemorySpec> FromProto(const v1::CudaKvMemory& proto) {
  if (proto.gpu_uuid().empty() || proto.gpu_uuid().size() > 64) {
    return absl::InvalidArgumentError("cuda.gpu_uuid must be 1..64 bytes");
  }
  if (proto.tensors().empty() || proto.tensors_size() > 65536) {
    return absl::InvalidArgumentError("cuda.tensors: 1..65536 tensors are required");
  }
  if (proto.ipc_events_size() > kMaxIpcEvents) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda.ipc_events: at most ", kMaxIpcEvents, " events"));
  }
  CudaMemorySpec spec;
  spec.gpu_uuid = proto.gpu_uuid();
  spec.num_blocks = proto.num_blocks();
  for (int i = 0; i < proto.tensors_size(); ++i) {
    const v1::CudaTensor& t = proto.tensors(i);
    absl::StatusOr<IpcHandleBytes> handle =
        Handle(t.ipc_handle(), absl::StrCat("cuda.tensors[", i, "].ipc_handle"));
    if (!handle.ok()) return handle.status();
    spec.tensors.push_back({*handle, t.base_offset(), t.allocation_bytes(), t.block_stride(),
                            t.piece_bytes(), t.layer(), t.kv_index()});
  }
  for (int i = 0; i < proto.ipc_events_size(); ++i) {
    absl::StatusOr<IpcHandleBytes> handle =
        Handle(proto.ipc_events(i), absl::StrCat("cuda.ipc_events[", i, "]"));
    if (!handle.ok()) return handle.status();
    spec.ipc_events.push_back(*handle);
  }
  if (proto.has_layer_flags()) {
    const v1::CudaLayerFlags& f = proto.layer_flags();
    absl::StatusOr<IpcHandleBytes> handle = Handle(f.ipc_handle(), "cuda.layer_flags.ipc_handle");
    if (!handle.ok()) return handle.status();
    spec.layer_flags = CudaLayerFlagsSpec{*handle, f.offset(), f.allocation_bytes()};
  }
  return spec;
}

absl::StatusOr<JobBlocks> JobBlocksFrom(
    const google::protobuf::RepeatedPtrField<v1::BlockTransfer>& blocks,
    const google::protobuf::RepeatedPtrField<std::string>& keys,
    const google::protobuf::RepeatedField<uint32_t>& block_ids) {
  if (!blocks.empty() && (!keys.empty() || !block_ids.empty())) {
    return absl::InvalidArgumentError("set either blocks or keys/block_ids, not both");
  }
  JobBlocks out;
  if (blocks.empty()) {  // RunSubmitJob checks that the arrays pair up.
    out.keys.assign(keys.begin(), keys.end());
    out.block_ids.assign(block_ids.begin(), block_ids.end());
    return out;
  }
  out.keys.reserve(blocks.size());
  out.block_ids.reserve(blocks.size());
  for (const v1::BlockTransfer& block : blocks) {
    out.keys.emplace_back(block.key());
    out.block_ids.push_back(block.block_id());
  }
  return out;
}

void ToProto(const JobCompletion& completion, v1::JobCompletion* out) {
  out->set_job_id(completion.job_id);
  out->set_kind(completion.kind == JobCompletion::Kind::kStore ? v1::JobCompletion::KIND_STORE
                                                               : v1::JobCompletion::KIND_LOAD);
  out->set_ok(completion.ok());
  for (uint32_t i : completion.failed_blocks) out->add_failed_blocks(i);
  out->set_error(completion.error);
  out->set_elapsed_us(static_cast<uint64_t>(absl::ToInt64Microseconds(completion.elapsed)));
}

}  // namespace kvstrata
