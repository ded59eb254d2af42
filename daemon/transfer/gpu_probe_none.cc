#include "daemon/transfer/gpu_probe.h"

namespace kvstrata {

GpuProbe ProbeGpus() { return {false, {}, "built without CUDA"}; }

}  // namespace kvstrata
