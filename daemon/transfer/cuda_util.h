// Small helpers shared by the CUDA transfer sources. CUDA build only. Thread-safe.
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

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_TRANSFER_CUDA_UTIL_H_
