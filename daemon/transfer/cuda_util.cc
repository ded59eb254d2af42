#include "daemon/transfer/cuda_util.h"

#include <cuda.h>

namespace kvstrata {
namespace {

// The driver function `name` (CUDA 12 ABI) through the runtime, or nullptr.
template <typename Fn>
Fn DriverFunction(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &found) !=
          cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    return nullptr;
  }
  return reinterpret_cast<Fn>(fn);
}

}  // namespace

cudaError_t StreamWriteValue64(cudaStream_t stream, uint64_t address, uint64_t value) {
  using WriteValue64 = CUresult (*)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);
  static const WriteValue64 write = DriverFunction<WriteValue64>("cuStreamWriteValue64");
  if (write == nullptr) return cudaErrorNotSupported;
  CUresult result = write(reinterpret_cast<CUstream>(stream), static_cast<CUdeviceptr>(address),
                          static_cast<cuuint64_t>(value), 0);
  return result == CUDA_SUCCESS ? cudaSuccess : cudaErrorUnknown;
}

cudaError_t AllocationSize(uint64_t base, uint64_t* bytes) {
  using GetAddressRange = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);
  static const GetAddressRange get = DriverFunction<GetAddressRange>("cuMemGetAddressRange");
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
