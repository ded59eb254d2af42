#include "daemon/transfer/cuda_process.h"

#include <cstdlib>

namespace kvstrata {

void PrepareCudaProcess() { setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", /*overwrite=*/0); }

}  // namespace kvstrata
