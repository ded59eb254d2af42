// What the CUDA runtime sees on this host. Built from gpu_probe_cuda.cu when the build
// has CUDA (KVSTRATA_WITH_CUDA), from gpu_probe_none.cc otherwise. Never fails: a host
// without a driver or GPU reports zero devices and the reason. Thread-safe.
#ifndef KVSTRATA_DAEMON_TRANSFER_GPU_PROBE_H_
#define KVSTRATA_DAEMON_TRANSFER_GPU_PROBE_H_

#include <string>
#include <vector>

namespace kvstrata {

struct GpuDevice {
  int index = 0;
  std::string name;
  std::string uuid;  // "GPU-xxxxxxxx-xxxx-..."
  size_t total_memory_bytes = 0;
};

struct GpuProbe {
  bool built_with_cuda = false;
  std::vector<GpuDevice> devices;
  std::string note;  // Why there are no devices, when there are none.
};

GpuProbe ProbeGpus();

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_TRANSFER_GPU_PROBE_H_
