#include <cuda_runtime.h>

#include <cstdio>

#include "daemon/transfer/gpu_probe.h"

namespace kvstrata {
namespace {

std::string FormatUuid(const cudaUUID_t& uuid) {
  const auto* b = reinterpret_cast<const unsigned char*>(uuid.bytes);
  char text[64];
  std::snprintf(text, sizeof(text),
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                b[14], b[15]);
  return text;
}

}  // namespace

GpuProbe ProbeGpus() {
  GpuProbe probe{true, {}, ""};
  int count = 0;
  cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    probe.note = cudaGetErrorString(error);
    return probe;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    probe.devices.push_back({i, prop.name, FormatUuid(prop.uuid), prop.totalGlobalMem});
  }
  if (probe.devices.empty()) probe.note = "no CUDA device visible";
  return probe;
}

}  // namespace kvstrata
