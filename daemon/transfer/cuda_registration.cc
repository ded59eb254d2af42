// Register / RegisterLocalForTesting / Release of CudaTransferEngine: opening CUDA IPC
// memory (once per process and handle, reference-counted) and event handles.
#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/transfer/cuda_transfer_engine.h"
#include "daemon/transfer/cuda_util.h"
#include "daemon/transfer/transfer_validation.h"

namespace kvstrata {
namespace {

std::string MemoryKey(int device, const IpcHandleBytes& handle) {
  std::string key = absl::StrCat(device, ":");
  key.append(handle.data(), handle.size());
  return key;
}

uint64_t MaxPiece(const CudaMemorySpec& spec) {
  uint64_t max = 0;
  for (const CudaTensorSpec& t : spec.tensors) max = std::max(max, t.piece_bytes);
  return max;
}

}  // namespace

absl::StatusOr<uint64_t> CudaTransferEngine::OpenAllocation(int device,
                                                            const IpcHandleBytes& ipc_handle,
                                                            uint64_t declared_bytes,
                                                            const std::string& what,
                                                            Registration* reg) {
  std::string key = MemoryKey(devices_[device].index, ipc_handle);
  auto it = opened_.find(key);
  if (it == opened_.end()) {
    cudaIpcMemHandle_t handle{};
    std::copy(ipc_handle.begin(), ipc_handle.end(), handle.reserved);
    void* base = nullptr;
    cudaError_t error = cudaIpcOpenMemHandle(&base, handle, cudaIpcMemLazyEnablePeerAccess);
    if (error != cudaSuccess) {
      return CudaError(error, absl::StrCat("cudaIpcOpenMemHandle(", what, ")").c_str());
    }
    uint64_t bytes = 0;
    error = AllocationSize(reinterpret_cast<uint64_t>(base), &bytes);
    if (error != cudaSuccess) {
      cudaIpcCloseMemHandle(base);
      return CudaError(error, absl::StrCat("cuMemGetAddressRange(", what, ")").c_str());
    }
    it = opened_.emplace(key, OpenedMemory{devices_[device].index, base, 0, bytes}).first;
  }
  // The client declares the allocation's size; the copies are bounded by it (see
  // ValidateGeometry), so it must not exceed what the handle really maps.
  if (declared_bytes > it->second.bytes) {
    absl::Status status = absl::InvalidArgumentError(
        absl::StrCat(what, ": allocation_bytes ", declared_bytes, " exceeds the ", it->second.bytes,
                     " bytes its IPC handle maps"));
    if (it->second.refs == 0) {
      cudaIpcCloseMemHandle(it->second.base);
      opened_.erase(it);
    }
    return status;
  }
  ++it->second.refs;
  reg->memory_keys.push_back(key);
  return reinterpret_cast<uint64_t>(it->second.base);
}

absl::Status CudaTransferEngine::OpenMemory(int device, const CudaMemorySpec& spec,
                                            Registration* reg) {
  for (size_t i = 0; i < spec.tensors.size(); ++i) {
    const CudaTensorSpec& t = spec.tensors[i];
    absl::StatusOr<uint64_t> base =
        OpenAllocation(device, t.ipc_handle, t.allocation_bytes, absl::StrCat("tensor ", i), reg);
    if (!base.ok()) return base.status();
    reg->tensors.push_back({*base + t.base_offset, t.block_stride, t.piece_bytes, t.layer});
  }
  if (spec.layer_flags.has_value()) {
    absl::StatusOr<uint64_t> base =
        OpenAllocation(device, spec.layer_flags->ipc_handle, spec.layer_flags->allocation_bytes,
                       "layer flags", reg);
    if (!base.ok()) return base.status();
    reg->layer_flags = *base + spec.layer_flags->offset;
  }
  return absl::OkStatus();
}

absl::Status CudaTransferEngine::OpenEvents(int device, const CudaMemorySpec& spec,
                                            Registration* reg) {
  (void)device;
  reg->owns_events = true;
  for (size_t i = 0; i < spec.ipc_events.size(); ++i) {
    cudaIpcEventHandle_t handle{};
    std::copy(spec.ipc_events[i].begin(), spec.ipc_events[i].end(), handle.reserved);
    cudaEvent_t event = nullptr;
    cudaError_t error = cudaIpcOpenEventHandle(&event, handle);
    if (error != cudaSuccess) {
      return CudaError(error, absl::StrCat("cudaIpcOpenEventHandle(event ", i, ")").c_str());
    }
    reg->events.push_back(event);
  }
  return absl::OkStatus();
}

void CudaTransferEngine::Release(Registration* reg) {
  cudaSetDevice(devices_[reg->device].index);
  if (reg->owns_events) {
    for (cudaEvent_t event : reg->events) cudaEventDestroy(event);
  }
  reg->events.clear();
  for (const std::string& key : reg->memory_keys) {
    auto it = opened_.find(key);
    if (it == opened_.end() || --it->second.refs > 0) continue;
    cudaIpcCloseMemHandle(it->second.base);
    opened_.erase(it);
  }
  reg->memory_keys.clear();
}

uint64_t CudaTransferEngine::Insert(std::shared_ptr<Registration> reg) {
  uint64_t id = next_id_++;
  registrations_.emplace(id, std::move(reg));
  return id;
}

absl::StatusOr<RegistrationId> CudaTransferEngine::Register(SessionId session,
                                                            const CudaMemorySpec& spec,
                                                            uint64_t block_bytes) {
  absl::Status status = ValidateGeometry(spec, block_bytes);
  if (status.ok()) status = ValidateIpcHandles(spec);
  if (!status.ok()) return status;
  absl::StatusOr<int> device = DeviceByUuid(spec.gpu_uuid);
  if (!device.ok()) return device.status();
  auto reg = std::make_shared<Registration>();
  *reg = {session, *device, spec.num_blocks, block_bytes, MaxPiece(spec)};
  MutexLock lock(&mu_);  // opened_ and the process-wide IPC handle table.
  cudaError_t error = cudaSetDevice(devices_[*device].index);
  if (error != cudaSuccess) return CudaError(error, "cudaSetDevice");
  status = OpenMemory(*device, spec, reg.get());
  if (status.ok()) status = OpenEvents(*device, spec, reg.get());
  if (!status.ok()) {
    Release(reg.get());
    return status;
  }
  return Insert(std::move(reg));
}

absl::StatusOr<RegistrationId> CudaTransferEngine::RegisterLocalForTesting(
    SessionId session, int device, const CudaMemorySpec& geometry,
    const std::vector<void*>& allocations, uint64_t block_bytes,
    const std::vector<cudaEvent_t>& events, void* layer_flags) {
  absl::Status status = ValidateGeometry(geometry, block_bytes);
  if (!status.ok()) return status;
  if (device < 0 || device >= device_count()) {
    return absl::NotFoundError(absl::StrCat("no device ", device));
  }
  if (allocations.size() != geometry.tensors.size()) {
    return absl::InvalidArgumentError("one allocation per tensor");
  }
  auto reg = std::make_shared<Registration>();
  *reg = {session, device, geometry.num_blocks, block_bytes, MaxPiece(geometry)};
  for (size_t i = 0; i < allocations.size(); ++i) {
    const CudaTensorSpec& t = geometry.tensors[i];
    uint64_t base = reinterpret_cast<uint64_t>(allocations[i]);
    reg->tensors.push_back({base + t.base_offset, t.block_stride, t.piece_bytes, t.layer});
  }
  reg->events = events;
  reg->layer_flags = reinterpret_cast<uint64_t>(layer_flags);
  MutexLock lock(&mu_);
  return Insert(std::move(reg));
}

}  // namespace kvstrata
