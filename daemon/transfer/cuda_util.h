// Small helpers shared by the CUDA transfer sources (cuda_util.cc). CUDA build only.
// Thread-safe.
#ifndef KVSTRATA_DAEMON_TRANSFER_CUDA_UTIL_H_
#define KVSTRATA_DAEMON_TRANSFER_CUDA_UTIL_H_

#include <cuda_runtime_api.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "daemon/transfer/gpu_uuid.h"

namespace kvstrata {

// FAILED_PRECONDITION "<call>: <cudaGetErrorString>".
inline absl::Status CudaError(cudaError_t error, const char* call) {
  return absl::FailedPreconditionError(absl::StrCat(call, ": ", cudaGetErrorString(error)));
}

// cuStreamWriteValue64 (the driver API, found through the runtime, so that the daemon
// links no libcuda): writes `value` to the device address once the stream's earlier work
// finished, after a memory barrier that makes that work's writes visible first.
// cudaErrorNotSupported when the driver lacks it.
cudaError_t StreamWriteValue64(cudaStream_t stream, uint64_t address, uint64_t value);

// cuMemGetAddressRange (the driver API, found through the runtime): the size in bytes of
// the allocation that starts at `base` (the address cudaIpcOpenMemHandle returned), so
// that a client's declared allocation size is checked, never trusted. cudaErrorNotSupported
// when the driver lacks it; cudaErrorInvalidValue when `base` is not an allocation's start.
cudaError_t AllocationSize(uint64_t base, uint64_t* bytes);

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_TRANSFER_CUDA_UTIL_H_
