// The driver's GPU UUID as text: "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", lowercase, as
// nvidia-smi and the Python client (kvstrata.gpu_uuid) print it. CUDA builds only; plain
// C++17 (included by .cu sources). Thread-safe.
#ifndef KVSTRATA_DAEMON_TRANSFER_GPU_UUID_H_
#define KVSTRATA_DAEMON_TRANSFER_GPU_UUID_H_

#include <cuda_runtime_api.h>

#include <cstdio>
#include <string>

namespace kvstrata {

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

#endif  // KVSTRATA_DAEMON_TRANSFER_GPU_UUID_H_
