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

}  // namespace

CopyError IssueStrided(const CopyLaunch& launch, absl::Span<const StridedCopy> copies,
                       CopyScratch* scratch, cudaStream_t stream) {
  bool store = launch.direction == CopyDirection::kDown;
  cudaMemcpyKind kind = store ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice;
  scratch->dsts.clear();
  scratch->srcs.clear();
  scratch->sizes.clear();
  for (const StridedCopy& c : copies) {
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

namespace {

// Runs of pieces at constant pitches as one cudaMemcpy2DAsync each (see GroupStrided), the
// rest in one cudaMemcpyBatchAsync.
CopyError IssueBatch(const CopyLaunch& launch, absl::Span<const PieceCopy> pieces,
                     CopyScratch* scratch, cudaStream_t stream) {
  return IssueStrided(launch, GroupStrided(pieces), scratch, stream);
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
  for (cudaEvent_t event : events_) {
    if (event != nullptr) cudaEventDestroy(event);
  }
}

cudaError_t CopyScratch::ReserveEvents() {
  for (cudaEvent_t& event : events_) {
    if (event != nullptr) continue;
    cudaError_t error = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
    if (error != cudaSuccess) return error;
  }
  return cudaSuccess;
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

namespace {

// One run of a kStaged transfer: blocks [first, end) of `plan` in chunks of `per_chunk`
// blocks, chunk k through staging buffer k % 2 (both of full size whatever the run's, so that
// the buffers are allocated once: cudaFree would wait for the whole device).
struct StagedRun {
  StagedRun(const CopyLaunch& launch, const StagedPlan& plan, size_t first, size_t end,
            CopyScratch* scratch)
      : launch(launch),
        plan(plan),
        first(first),
        end(end),
        scratch(scratch),
        per_chunk(std::max<size_t>(1, kStagingBufferBytes / plan.block_bytes)),
        chunks((end - first + per_chunk - 1) / per_chunk),
        buffer_bytes(per_chunk * plan.block_bytes) {}

  bool store() const { return launch.direction == CopyDirection::kDown; }
  size_t chunk_first(size_t k) const { return first + k * per_chunk; }
  size_t chunk_end(size_t k) const { return std::min(end, chunk_first(k + 1)); }
  unsigned char* buffer(size_t k) const { return scratch->blocks() + k % 2 * buffer_bytes; }

  // The buffers and events (Describe reserves the descriptors, once the pieces are planned:
  // a load's first DMAs are issued before).
  CopyError Reserve() const {
    cudaError_t error = scratch->ReserveBlocks(2 * buffer_bytes);
    if (error != cudaSuccess) return {error, "cudaMalloc(staging)"};
    error = scratch->ReserveEvents();
    if (error != cudaSuccess) return {error, "cudaEventCreate(staging)"};
    return {};
  }

  // Chunk k's whole slots between their L1 slots and buffer k % 2 (one DMA entry per block),
  // once the buffer's kernel is done with it: the last scatter from it (a load) or this
  // chunk's gather into it (a store). Moved(k) marks it done (after what else `stream` has to
  // do first).
  CopyError Move(size_t k, cudaStream_t stream) const {
    cudaError_t error = cudaSuccess;
    if (store() || k >= 2) error = cudaStreamWaitEvent(stream, scratch->scattered(k), 0);
    if (error != cudaSuccess) return {error, "cudaStreamWaitEvent(staging kernel)"};
    std::vector<PieceCopy>& slots = scratch->slots;  // gpu = staging, host = slot.
    slots.clear();
    for (size_t b = chunk_first(k); b < chunk_end(k); ++b) {
      slots.push_back(
          {reinterpret_cast<uint64_t>(buffer(k) + (b - chunk_first(k)) * plan.block_bytes),
           plan.slots[b], plan.block_bytes});
    }
    return IssueBatch(launch, slots, scratch, stream);
  }
  CopyError Moved(size_t k, cudaStream_t stream) const {
    cudaError_t error = cudaEventRecord(scratch->moved(k), stream);
    if (error != cudaSuccess) return {error, "cudaEventRecord(staging DMA)"};
    return {};
  }

  // Chunk k's kernel (scatter or gather) on `scatter`, once buffer k % 2 holds the chunk (a
  // load) or its last DMA read it out (a store).
  CopyError Scatter(size_t k, cudaStream_t scatter) const {
    cudaError_t error = cudaSuccess;
    if (!store() || k >= 2) error = cudaStreamWaitEvent(scatter, scratch->moved(k), 0);
    if (error != cudaSuccess) return {error, "cudaStreamWaitEvent(staging DMA)"};
    const uint32_t base = plan.first_piece[first];
    const CopyDescriptor* descriptors =
        scratch->device() + (plan.first_piece[chunk_first(k)] - base);
    const uint32_t pieces = plan.first_piece[chunk_end(k)] - plan.first_piece[chunk_first(k)];
    error = LaunchCopyKernel(descriptors, pieces, launch.grid_blocks, scatter);
    if (error != cudaSuccess) return {error, "staged copy kernel launch"};
    error = cudaEventRecord(scratch->scattered(k), scatter);
    if (error != cudaSuccess) return {error, "cudaEventRecord(staging kernel)"};
    return {};
  }

  // One descriptor per piece of blocks [b0, b1), staged at its block's place in its chunk's
  // buffer + offset; copied to the GPU on `stream`, ahead of the kernels of those blocks. The
  // first call reserves the descriptors of the whole run (plan.max_pieces, or the pieces
  // planned already): a later one must not move them while the kernels queued so far read
  // them.
  CopyError Describe(size_t b0, size_t b1, cudaStream_t stream) const {
    const uint32_t base = plan.first_piece[first];
    const size_t needed = plan.first_piece[b1] - base;
    if (b0 == first) {
      cudaError_t error = scratch->Reserve(std::max({plan.max_pieces, plan.pieces.size(), needed}));
      if (error != cudaSuccess) return {error, "cudaMallocHost(copy descriptors)"};
    } else if (needed > scratch->capacity()) {
      return {cudaErrorInvalidValue, "copy descriptors beyond the plan's max_pieces"};
    }
    const bool down = store();
    for (size_t b = b0; b < b1; ++b) {
      const size_t k = (b - first) / per_chunk;
      unsigned char* block = buffer(k) + (b - chunk_first(k)) * plan.block_bytes;
      for (uint32_t i = plan.first_piece[b]; i < plan.first_piece[b + 1]; ++i) {
        const PieceCopy& p = plan.pieces[i];
        void* gpu = reinterpret_cast<void*>(p.gpu);
        void* staged = block + p.host;
        scratch->staging()[i - base] = {down ? gpu : staged, down ? staged : gpu, p.bytes};
      }
    }
    const size_t from = plan.first_piece[b0] - base;
    cudaError_t error =
        cudaMemcpyAsync(scratch->device() + from, scratch->staging() + from,
                        (needed - from) * sizeof(CopyDescriptor), cudaMemcpyHostToDevice, stream);
    if (error != cudaSuccess) return {error, "cudaMemcpyAsync(copy descriptors)"};
    return {};
  }

  const CopyLaunch& launch;
  const StagedPlan& plan;
  const size_t first;
  const size_t end;
  CopyScratch* const scratch;
  const size_t per_chunk;
  const size_t chunks;
  const size_t buffer_bytes;
};

}  // namespace

CopyError IssueStagedCopies(const CopyLaunch& launch, const StagedPlan& plan, CopyScratch* scratch,
                            cudaStream_t stream, cudaStream_t scatter,
                            const PlanBlocks& plan_blocks) {
  const size_t blocks = plan.slots.size();
  if (blocks == 0) return {};
  const StagedRun run(launch, plan, 0, blocks, scratch);
  CopyError error = run.Reserve();
  if (!error.ok()) return error;
  const bool store = run.store();
  // A load's descriptors go on the DMA stream, between its chunks: the copy engine then takes
  // them in turn with the chunks instead of behind whichever chunk is ready first.
  const cudaStream_t describe_on = store ? scatter : stream;
  auto describe = [&](size_t b0, size_t b1) {
    if (plan_blocks) plan_blocks(b0, b1);
    return run.Describe(b0, b1, describe_on);
  };
  auto move = [&](size_t k) {
    CopyError moved = run.Move(k, stream);
    return moved.ok() ? run.Moved(k, stream) : moved;
  };
  // The first chunk is planned alone: a load's first DMA (it needs only the slots) moves
  // meanwhile, and the first kernel waits only for its own chunk's descriptors. A load's
  // second DMA is queued before the rest is planned, so the copy engine keeps busy.
  const size_t head = run.chunk_end(0);
  if (!store) error = run.Move(0, stream);
  if (error.ok()) error = describe(0, head);
  if (error.ok() && !store) error = run.Moved(0, stream);
  for (size_t k = 0; error.ok() && k < run.chunks; ++k) {
    error = run.Scatter(k, scatter);
    if (error.ok() && store) error = move(k);
    if (error.ok() && k == 0 && run.chunks > 1) {
      if (!store) error = run.Move(1, stream);
      if (error.ok()) error = describe(head, blocks);
      if (error.ok() && !store) error = run.Moved(1, stream);
    }
    if (error.ok() && !store && k + 2 < run.chunks) {
      error = move(k + 2);  // Into the buffer the kernel above reads.
    }
  }
  if (!error.ok()) return error;
  cudaError_t joined = cudaEventRecord(scratch->joined(), scatter);
  if (joined == cudaSuccess) joined = cudaStreamWaitEvent(stream, scratch->joined(), 0);
  if (joined != cudaSuccess) return {joined, "joining the staging streams"};
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
