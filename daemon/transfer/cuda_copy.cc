#include "daemon/transfer/cuda_copy.h"

#include <algorithm>

namespace kvstrata {
namespace {

// cudaMemcpyBatchAsync takes the whole list in one call; very long lists are cut.
constexpr size_t kMaxBatch = 16384;

void* GpuPtr(const PieceCopy& p) { return reinterpret_cast<void*>(p.gpu); }
void* HostPtr(const PieceCopy& p) { return reinterpret_cast<void*>(p.host); }

CopyError IssueLoop(const CopyLaunch& launch, absl::Span<const PieceCopy> pieces,
                    cudaStream_t stream) {
  bool store = launch.direction == CopyDirection::kDown;
  cudaMemcpyKind kind = store ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice;
  for (const PieceCopy& p : pieces) {
    void* dst = store ? HostPtr(p) : GpuPtr(p);
    const void* src = store ? GpuPtr(p) : HostPtr(p);
    cudaError_t error = cudaMemcpyAsync(dst, src, p.bytes, kind, stream);
    if (error != cudaSuccess) return {error, "cudaMemcpyAsync"};
  }
  return {};
}

// Runs of pieces at constant pitches as one cudaMemcpy2DAsync each (see GroupStrided), the
// rest in one cudaMemcpyBatchAsync.
CopyError IssueBatch(const CopyLaunch& launch, absl::Span<const PieceCopy> pieces,
                     CopyScratch* scratch, cudaStream_t stream) {
  bool store = launch.direction == CopyDirection::kDown;
  cudaMemcpyKind kind = store ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice;
  scratch->dsts.clear();
  scratch->srcs.clear();
  scratch->sizes.clear();
  for (const StridedCopy& c : GroupStrided(pieces)) {
    void* gpu = reinterpret_cast<void*>(c.gpu);
    void* host = reinterpret_cast<void*>(c.host);
    if (c.rows > 1) {
      cudaError_t error = store ? cudaMemcpy2DAsync(host, c.host_pitch, gpu, c.gpu_pitch, c.bytes,
                                                    c.rows, kind, stream)
                                : cudaMemcpy2DAsync(gpu, c.gpu_pitch, host, c.host_pitch, c.bytes,
                                                    c.rows, kind, stream);
      if (error != cudaSuccess) return {error, "cudaMemcpy2DAsync"};
      continue;
    }
    scratch->dsts.push_back(store ? host : gpu);
    scratch->srcs.push_back(store ? gpu : host);
    scratch->sizes.push_back(c.bytes);
  }
  cudaMemcpyAttributes attrs{};
  attrs.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  attrs.flags = cudaMemcpyFlagDefault;
  size_t first_index = 0;
  const size_t singles = scratch->sizes.size();
  for (size_t begin = 0; begin < singles; begin += kMaxBatch) {
    size_t count = std::min(kMaxBatch, singles - begin);
    cudaError_t error =
        cudaMemcpyBatchAsync(scratch->dsts.data() + begin, scratch->srcs.data() + begin,
                             scratch->sizes.data() + begin, count, &attrs, &first_index, 1, stream);
    if (error != cudaSuccess) return {error, "cudaMemcpyBatchAsync"};
  }
  return {};
}

CopyError IssueKernel(const CopyLaunch& launch, absl::Span<const PieceCopy> pieces,
                      CopyScratch* scratch, cudaStream_t stream) {
  std::vector<PieceCopy> chunks = SplitPieces(pieces, kCopyKernelChunkBytes);
  cudaError_t error = scratch->Reserve(chunks.size());
  if (error != cudaSuccess) return {error, "cudaMalloc(copy descriptors)"};
  bool store = launch.direction == CopyDirection::kDown;
  CopyDescriptor* staging = scratch->staging();
  for (size_t i = 0; i < chunks.size(); ++i) {
    const PieceCopy& c = chunks[i];
    staging[i] = {store ? GpuPtr(c) : HostPtr(c), store ? HostPtr(c) : GpuPtr(c), c.bytes};
  }
  error = cudaMemcpyAsync(scratch->device(), staging, chunks.size() * sizeof(CopyDescriptor),
                          cudaMemcpyHostToDevice, stream);
  if (error != cudaSuccess) return {error, "cudaMemcpyAsync(copy descriptors)"};
  error = LaunchCopyKernel(scratch->device(), static_cast<uint32_t>(chunks.size()),
                           launch.grid_blocks, stream);
  if (error != cudaSuccess) return {error, "copy kernel launch"};
  return {};
}

}  // namespace

CopyScratch::~CopyScratch() {
  Free();
  if (blocks_ != nullptr) cudaFree(blocks_);
}

void CopyScratch::Free() {
  if (staging_ != nullptr) cudaFreeHost(staging_);
  if (device_ != nullptr) cudaFree(device_);
  staging_ = nullptr;
  device_ = nullptr;
  capacity_ = 0;
}

cudaError_t CopyScratch::Reserve(size_t descriptors) {
  if (descriptors <= capacity_) return cudaSuccess;
  Free();
  size_t capacity = std::max<size_t>(descriptors, 4096);
  cudaError_t error =
      cudaMallocHost(reinterpret_cast<void**>(&staging_), capacity * sizeof(CopyDescriptor));
  if (error == cudaSuccess)
    error = cudaMalloc(reinterpret_cast<void**>(&device_), capacity * sizeof(CopyDescriptor));
  if (error != cudaSuccess) {
    Free();
    return error;
  }
  capacity_ = capacity;
  return cudaSuccess;
}

cudaError_t CopyScratch::ReserveBlocks(size_t bytes) {
  if (bytes <= blocks_capacity_) return cudaSuccess;
  if (blocks_ != nullptr) cudaFree(blocks_);
  blocks_capacity_ = 0;
  cudaError_t error = cudaMalloc(reinterpret_cast<void**>(&blocks_), bytes);
  if (error == cudaSuccess) blocks_capacity_ = bytes;
  return error;
}

CopyError IssueStagedCopies(const CopyLaunch& launch, const StagedPlan& plan, size_t first,
                            size_t end, CopyScratch* scratch, cudaStream_t stream) {
  if (end <= first) return {};
  const size_t blocks = end - first;
  const size_t per_chunk = std::max<size_t>(1, kStagingBytes / plan.block_bytes);
  const uint32_t base = plan.first_piece[first];
  cudaError_t error = scratch->Reserve(plan.first_piece[end] - base);
  if (error == cudaSuccess)
    error = scratch->ReserveBlocks(std::min(blocks, per_chunk) * plan.block_bytes);
  if (error != cudaSuccess) return {error, "cudaMalloc(staging)"};
  if (scratch->blocks() == nullptr) return {cudaErrorMemoryAllocation, "staging buffer"};
  const bool store = launch.direction == CopyDirection::kDown;
  unsigned char* staging = scratch->blocks();
  std::vector<PieceCopy> slots;  // gpu = staging, host = slot: one DMA per block.
  // A chunk's blocks between their slots and the staging buffer.
  auto move_chunk = [&](size_t chunk) {
    const size_t count = std::min(per_chunk, end - chunk);
    slots.clear();
    for (size_t b = 0; b < count; ++b) {
      slots.push_back({reinterpret_cast<uint64_t>(staging + b * plan.block_bytes),
                       plan.slots[chunk + b], plan.block_bytes});
    }
    return IssueBatch(launch, slots, scratch, stream);
  };
  // A load's first chunk is on its way into the staging buffer while this thread writes
  // the descriptors: the copy engines need not wait for them.
  if (!store) {
    CopyError copied = move_chunk(first);
    if (!copied.ok()) return copied;
  }
  // One descriptor per piece, staged at (block index in its chunk) * block_bytes + offset.
  for (size_t b = first; b < end; ++b) {
    unsigned char* block = staging + (b - first) % per_chunk * plan.block_bytes;
    for (uint32_t i = plan.first_piece[b]; i < plan.first_piece[b + 1]; ++i) {
      const PieceCopy& p = plan.pieces[i];
      void* gpu = reinterpret_cast<void*>(p.gpu);
      void* staged = block + p.host;
      scratch->staging()[i - base] = {store ? gpu : staged, store ? staged : gpu, p.bytes};
    }
  }
  error = cudaMemcpyAsync(scratch->device(), scratch->staging(),
                          (plan.first_piece[end] - base) * sizeof(CopyDescriptor),
                          cudaMemcpyHostToDevice, stream);
  if (error != cudaSuccess) return {error, "cudaMemcpyAsync(copy descriptors)"};
  for (size_t chunk = first; chunk < end; chunk += per_chunk) {
    const size_t count = std::min(per_chunk, end - chunk);
    const CopyDescriptor* descriptors = scratch->device() + (plan.first_piece[chunk] - base);
    const uint32_t pieces = plan.first_piece[chunk + count] - plan.first_piece[chunk];
    if (!store && chunk != first) {
      CopyError copied = move_chunk(chunk);
      if (!copied.ok()) return copied;
    }
    error = LaunchCopyKernel(descriptors, pieces, launch.grid_blocks, stream);
    if (error != cudaSuccess) return {error, "staged copy kernel launch"};
    if (store) {
      CopyError copied = move_chunk(chunk);
      if (!copied.ok()) return copied;
    }
  }
  return {};
}

CopyError IssueCopies(const CopyLaunch& launch, absl::Span<const PieceCopy> pieces,
                      CopyScratch* scratch, cudaStream_t stream) {
  if (pieces.empty()) return {};
  switch (launch.strategy) {
    case CopyStrategy::kMemcpyLoop:
      return IssueLoop(launch, pieces, stream);
    case CopyStrategy::kKernel:
      return IssueKernel(launch, pieces, scratch, stream);
    case CopyStrategy::kAuto:
    case CopyStrategy::kStaged:
    case CopyStrategy::kBatch:
      return IssueBatch(launch, pieces, scratch, stream);
  }
  return {cudaErrorInvalidValue, "IssueCopies(strategy)"};
}

}  // namespace kvstrata
