// The gather/scatter copy kernel: one launch copies many (src, dst, bytes) pieces between
// GPU memory and mapped pinned host memory. C++17 (compiled by nvcc); no absl here.
#ifndef KVSTRATA_DAEMON_TRANSFER_COPY_KERNEL_H_
#define KVSTRATA_DAEMON_TRANSFER_COPY_KERNEL_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace kvstrata {

struct CopyDescriptor {
  const void* src = nullptr;
  void* dst = nullptr;
  uint64_t bytes = 0;
};

inline constexpr int kCopyKernelThreads = 512;
// Pieces are split to at most this many bytes so thread blocks share the work evenly.
inline constexpr uint64_t kCopyKernelChunkBytes = 64 * 1024;

// Launches the kernel on `stream`; `descriptors` (count entries) must be readable by the
// device until the kernel finished. 16-byte vector copies where src and dst are 16-byte
// aligned, bytes elsewhere. Returns the launch error.
cudaError_t LaunchCopyKernel(const CopyDescriptor* descriptors, uint32_t count, int grid_blocks,
                             cudaStream_t stream);

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_TRANSFER_COPY_KERNEL_H_
