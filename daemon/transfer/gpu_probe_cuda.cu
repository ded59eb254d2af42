#include <cuda_runtime.h>

#include "daemon/transfer/gpu_probe.h"
#include "daemon/transfer/gpu_uuid.h"

namespace kvstrata {

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
    probe.devices.push_back({i, prop.name, FormatGpuUuid(prop.uuid), prop.totalGlobalMem});
  }
  if (probe.devices.empty()) probe.note = "no CUDA device visible";
  return probe;
}

}  // namespace kvstrata
