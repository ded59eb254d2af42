// Issues one transfer's copies on a stream with one of the copy strategies. CUDA build
// only. Not thread-safe: a CopyScratch belongs to one in-flight transfer at a time.
#ifndef KVSTRATA_DAEMON_TRANSFER_CUDA_COPY_H_
#define KVSTRATA_DAEMON_TRANSFER_CUDA_COPY_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <vector>

#include "daemon/transfer/copy_kernel.h"
#include "daemon/transfer/transfer_engine.h"
#include "daemon/transfer/transfer_validation.h"

namespace kvstrata {

// Buffers one in-flight transfer needs until its copies finished on the GPU.
class CopyScratch {
 public:
  CopyScratch() = default;
  ~CopyScratch();
  CopyScratch(const CopyScratch&) = delete;
  CopyScratch& operator=(const CopyScratch&) = delete;

  // Kernel descriptors: pinned staging (filled by the host) and their device copy.
  cudaError_t Reserve(size_t descriptors);
  CopyDescriptor* staging() { return staging_; }
  CopyDescriptor* device() { return device_; }
  // GPU staging buffer for kStaged, allocated on first use; independent of Reserve (which
  // reallocates only the descriptor buffers).
  cudaError_t ReserveBlocks(size_t bytes);
  unsigned char* blocks() { return blocks_; }

  std::vector<void*> dsts;
  std::vector<const void*> srcs;
  std::vector<size_t> sizes;

 private:
  void Free();  // The descriptor buffers.
  CopyDescriptor* staging_ = nullptr;
  CopyDescriptor* device_ = nullptr;
  size_t capacity_ = 0;
  unsigned char* blocks_ = nullptr;
  size_t blocks_capacity_ = 0;
};

// GPU staging per stream of an in-flight transfer for kStaged; a block larger than this
// uses kBatch.
inline constexpr uint64_t kStagingBytes = 16ULL << 20;

struct CopyError {
  cudaError_t error = cudaSuccess;
  const char* call = "";
  bool ok() const { return error == cudaSuccess; }
};

struct CopyLaunch {
  CopyStrategy strategy = CopyStrategy::kBatch;  // Resolved, not kAuto.
  CopyDirection direction = CopyDirection::kDown;
  int grid_blocks = 0;  // Kernel grid cap (a few blocks per SM).
};

// Enqueues `pieces` on `stream`. For kKernel the pieces' host addresses must be the
// device view of the pinned region (cudaHostGetDevicePointer).
CopyError IssueCopies(const CopyLaunch& launch, absl::Span<const PieceCopy> pieces,
                      CopyScratch* scratch, cudaStream_t stream);

// kStaged for blocks [first, end) of `plan`: per chunk of blocks that fits the staging
// buffer, a load DMAs whole slots into staging and scatters the pieces on the GPU; a store
// gathers on the GPU, then DMAs.
CopyError IssueStagedCopies(const CopyLaunch& launch, const StagedPlan& plan, size_t first,
                            size_t end, CopyScratch* scratch, cudaStream_t stream);

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_TRANSFER_CUDA_COPY_H_
