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

cudaError_t AllocationSize(uint64_t base, uint64_t* bytes) {
  using GetAddressRange = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);
  static GetAddressRange get = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      fn = nullptr;
    }
    return reinterpret_cast<GetAddressRange>(fn);
  }();
  if (get == nullptr) return cudaErrorNotSupported;
  CUdeviceptr start = 0;
  size_t size = 0;
  if (get(&start, &size, static_cast<CUdeviceptr>(base)) != CUDA_SUCCESS) {
    return cudaErrorUnknown;
  }
  if (start != static_cast<CUdeviceptr>(base)) return cudaErrorInvalidValue;
  *bytes = size;
  return cudaSuccess;
}

}  // namespace kvstrata
