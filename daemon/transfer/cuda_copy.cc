#include "daemon/transfer/cuda_copy.h"

#include <algorithm>

namespace kvstrata {
namespace {

// cudaMemcpyBatchAsync takes the whole list in one call; very long lists are cut.
constexpr size_t kMaxBatch = 16384;

void* GpuPtr(const PieceCopy& p) { return reinterpret_cast<void*>(p.gpu); }
void* HostPtr(const PieceCopy& p) { return reinterpret_cast<void*>(p.host); }

CopyError IssueLoop(const CopyLaunch& launch, const std::vector<PieceCopy>& pieces,
                    cudaStream_t stream) {
  bool store = launch.direction == TransferDirection::kGpuToHost;
  cudaMemcpyKind kind = store ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice;
  for (const PieceCopy& p : pieces) {
    void* dst = store ? HostPtr(p) : GpuPtr(p);
    const void* src = store ? GpuPtr(p) : HostPtr(p);
    cudaError_t error = cudaMemcpyAsync(dst, src, p.bytes, kind, stream);
    if (error != cudaSuccess) return {error, "cudaMemcpyAsync"};
  }
  return {};
}

CopyError IssueBatch(const CopyLaunch& launch, const std::vector<PieceCopy>& pieces,
                     CopyScratch* scratch, cudaStream_t stream) {
  bool store = launch.direction == TransferDirection::kGpuToHost;
  scratch->dsts.clear();
  scratch->srcs.clear();
  scratch->sizes.clear();
  for (const PieceCopy& p : pieces) {
    scratch->dsts.push_back(store ? HostPtr(p) : GpuPtr(p));
    scratch->srcs.push_back(store ? GpuPtr(p) : HostPtr(p));
    scratch->sizes.push_back(p.bytes);
  }
  cudaMemcpyAttributes attrs{};
  attrs.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  attrs.flags = cudaMemcpyFlagDefault;
  size_t first_index = 0;
  for (size_t begin = 0; begin < pieces.size(); begin += kMaxBatch) {
    size_t count = std::min(kMaxBatch, pieces.size() - begin);
    cudaError_t error = cudaMemcpyBatchAsync(
        scratch->dsts.data() + begin, scratch->srcs.data() + begin, scratch->sizes.data() + begin,
        count, &attrs, &first_index, 1, stream);
    if (error != cudaSuccess) return {error, "cudaMemcpyBatchAsync"};
  }
  return {};
}

CopyError IssueKernel(const CopyLaunch& launch, const std::vector<PieceCopy>& pieces,
                      CopyScratch* scratch, cudaStream_t stream) {
  std::vector<PieceCopy> chunks = SplitPieces(pieces, kCopyKernelChunkBytes);
  cudaError_t error = scratch->Reserve(chunks.size());
  if (error != cudaSuccess) return {error, "cudaMalloc(copy descriptors)"};
  bool store = launch.direction == TransferDirection::kGpuToHost;
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

CopyScratch::~CopyScratch() { Free(); }

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
  cudaError_t error = cudaMallocHost(reinterpret_cast<void**>(&staging_), capacity * sizeof(CopyDescriptor));
  if (error == cudaSuccess) error = cudaMalloc(reinterpret_cast<void**>(&device_), capacity * sizeof(CopyDescriptor));
  if (error != cudaSuccess) {
    Free();
    return error;
  }
  capacity_ = capacity;
  return cudaSuccess;
}

CopyError IssueCopies(const CopyLaunch& launch, const std::vector<PieceCopy>& pieces,
                      CopyScratch* scratch, cudaStream_t stream) {
  if (pieces.empty()) return {};
  switch (launch.strategy) {
    case CopyStrategy::kMemcpyLoop: return IssueLoop(launch, pieces, stream);
    case CopyStrategy::kKernel: return IssueKernel(launch, pieces, scratch, stream);
    case CopyStrategy::kAuto:
    case CopyStrategy::kBatch: return IssueBatch(launch, pieces, scratch, stream);
  }
  return {cudaErrorInvalidValue, "IssueCopies(strategy)"};
}

}  // namespace kvstrata
