#include "daemon/transfer/cuda_util.h"

#include <cuda.h>

namespace kvstrata {

cudaError_t StreamWriteValue64(cudaStream_t stream, uint64_t address, uint64_t value) {
  using WriteValue64 = CUresult (*)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);
  static WriteValue64 write = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuStreamWriteValue64", &fn, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      fn = nullptr;
    }
    return reinterpret_cast<WriteValue64>(fn);
  }();
  if (write == nullptr) return cudaErrorNotSupported;
  CUresult result = write(reinterpret_cast<CUstream>(stream), static_cast<CUdeviceptr>(address),
                          static_cast<cuuint64_t>(value), 0);
  return result == CUDA_SUCCESS ? cudaSuccess : cudaErrorUnknown;
}

}  // namespace kvstrata
