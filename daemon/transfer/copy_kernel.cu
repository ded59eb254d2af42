#include "daemon/transfer/copy_kernel.h"

namespace kvstrata {
namespace {

constexpr int kUnroll = 4;

__device__ void CopyVectors(const uint4* src, uint4* dst, uint64_t count) {
  uint64_t i = threadIdx.x;
  const uint64_t step = blockDim.x;
  for (; i + (kUnroll - 1) * step < count; i += kUnroll * step) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = __ldcs(src + i + u * step);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) __stcs(dst + i + u * step, v[u]);
  }
  for (; i < count; i += step) __stcs(dst + i, __ldcs(src + i));
}

__device__ void CopyPiece(const CopyDescriptor& d) {
  const auto* src = static_cast<const unsigned char*>(d.src);
  auto* dst = static_cast<unsigned char*>(d.dst);
  uint64_t done = 0;
  if (((reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst)) & 15) == 0) {
    uint64_t vectors = d.bytes / 16;
    CopyVectors(reinterpret_cast<const uint4*>(src), reinterpret_cast<uint4*>(dst), vectors);
    done = vectors * 16;
  }
  for (uint64_t i = done + threadIdx.x; i < d.bytes; i += blockDim.x) dst[i] = src[i];
}

__global__ void CopyKernel(const CopyDescriptor* descriptors, uint32_t count) {
  for (uint32_t i = blockIdx.x; i < count; i += gridDim.x) {
    CopyDescriptor d = descriptors[i];
    CopyPiece(d);
  }
}

}  // namespace

cudaError_t LaunchCopyKernel(const CopyDescriptor* descriptors, uint32_t count, int grid_blocks,
                             cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  unsigned int grid = count < static_cast<uint32_t>(grid_blocks) ? count : grid_blocks;
  CopyKernel<<<grid, kCopyKernelThreads, 0, stream>>>(descriptors, count);
  return cudaGetLastError();
}

}  // namespace kvstrata
