// Issues one transfer's copies on a stream with one of the copy strategies. CUDA build
// only. Not thread-safe: a CopyScratch belongs to one in-flight transfer at a time.
#ifndef KVSTRATA_DAEMON_TRANSFER_CUDA_COPY_H_
#define KVSTRATA_DAEMON_TRANSFER_CUDA_COPY_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
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
  size_t capacity() const { return capacity_; }  // descriptors reserved
  CopyDescriptor* staging() { return staging_; }
  CopyDescriptor* device() { return device_; }
  // GPU staging for kStaged (its two buffers), allocated on first use; independent of
  // Reserve (which reallocates only the descriptor buffers).
  cudaError_t ReserveBlocks(size_t bytes);
  unsigned char* blocks() { return blocks_; }
  // kStaged's events, created on first use: moved(i) = buffer i's DMA ended, scattered(i) =
  // its kernel ended, joined = the kernel stream's end (waited for by the DMA stream).
  cudaError_t ReserveEvents();
  cudaEvent_t moved(size_t buffer) { return events_[buffer % 2]; }
  cudaEvent_t scattered(size_t buffer) { return events_[2 + buffer % 2]; }
  cudaEvent_t joined() { return events_[4]; }

  std::vector<void*> dsts;
  std::vector<const void*> srcs;
  std::vector<size_t> sizes;
  std::vector<PieceCopy> slots;  // kStaged: one chunk's slot <-> staging DMAs.

 private:
  void Free();  // The descriptor buffers.
  CopyDescriptor* staging_ = nullptr;
  CopyDescriptor* device_ = nullptr;
  size_t capacity_ = 0;
  unsigned char* blocks_ = nullptr;
  size_t blocks_capacity_ = 0;
  cudaEvent_t events_[5] = {};
};

// GPU staging of an in-flight transfer for kStaged: two buffers of this many bytes, so that
// one buffer's DMA overlaps the other's kernel; a block larger than this uses kBatch. Large:
// the copy engine runs a transfer's DMAs one at a time whatever the streams, and each costs
// ~5 us beyond its bytes (bench/results/h100-2026-11-25-wakeups/NOTES.md, "Staged loads in
// 32 MiB chunks").
inline constexpr uint64_t kStagingBufferBytes = 32ULL << 20;

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

// kBatch's copies, already grouped (GroupStrided): each copy of several rows as one
// cudaMemcpy2DAsync, the single rows in one cudaMemcpyBatchAsync, on `stream`.
CopyError IssueStrided(const CopyLaunch& launch, absl::Span<const StridedCopy> copies,
                       CopyScratch* scratch, cudaStream_t stream);

// Adds the pieces of blocks [first, end) to the StagedPlan being issued (PlanStagedBlocks).
using PlanBlocks = std::function<void(size_t first, size_t end)>;

// kStaged for every block of `plan`, in chunks of blocks that fit a staging buffer, the two
// buffers in turn: a load DMAs a chunk's slots into a buffer on `stream` and scatters its
// pieces with a kernel on `scatter`; a store gathers on `scatter`, then DMAs on `stream`. A
// buffer's next DMA waits for its last kernel and the other way round, so the copy engine
// moves one chunk while the SMs scatter the other. Every copy has ended once `stream`'s work
// enqueued so far has (`scatter` is joined into it). `plan_blocks` (empty: `plan` has every
// block's pieces already) plans the first chunk's pieces, then the rest's, as they are
// needed: a load's first DMAs need only plan.slots and are issued before either. `plan`
// (possibly growing through `plan_blocks`) must bound its pieces by plan.max_pieces.
CopyError IssueStagedCopies(const CopyLaunch& launch, const StagedPlan& plan, CopyScratch* scratch,
                            cudaStream_t stream, cudaStream_t scatter,
                            const PlanBlocks& plan_blocks = {});

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_TRANSFER_CUDA_COPY_H_
