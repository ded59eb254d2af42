// Small helpers shared by the CUDA transfer sources. CUDA build only. Thread-safe.
#ifndef KVSTRATA_DAEMON_TRANSFER_CUDA_UTIL_H_
#define KVSTRATA_DAEMON_TRANSFER_CUDA_UTIL_H_

#include <cuda_runtime_api.h>

#include <cstdio>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kvstrata {

// FAILED_PRECONDITION "<call>: <cudaGetErrorString>".
inline absl::Status CudaError(cudaError_t error, const char* call) {
  return absl::FailedPreconditionError(absl::StrCat(call, ": ", cudaGetErrorString(error)));
}

// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi and gpu_probe_cuda.cu print it.
inline std::string FormatGpuUuid(const cudaUUID_t& uuid) {
  const auto* b = reinterpret_cast<const unsigned char*>(uuid.bytes);
  char text[64];
  std::snprintf(text, sizeof(text),
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                b[14], b[15]);
  return text;
}

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_TRANSFER_CUDA_UTIL_H_
