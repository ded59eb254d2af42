#include "tests/gpu/gpu_kv_fixture.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace kvstrata::gpu_test {
namespace {

constexpr uint64_t kKiB = 1024;

CudaTensorSpec Tensor(uint32_t num_blocks, uint64_t piece, uint64_t stride, uint64_t offset) {
  CudaTensorSpec t;
  t.base_offset = offset;
  t.block_stride = stride;
  t.piece_bytes = piece;
  t.allocation_bytes = offset + (num_blocks - 1) * stride + piece;
  return t;
}

}  // namespace

bool HasCudaDevice() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

KvGeometry PerLayerGeometry(uint32_t num_blocks) {
  KvGeometry g{"per-layer", {}, 0};
  g.spec.num_blocks = num_blocks;
  const uint64_t piece = 8 * 128 * 2 * 16;  // 32 KiB
  for (uint32_t layer = 0; layer < 32; ++layer) {
    for (uint32_t kv = 0; kv < 2; ++kv) {
      CudaTensorSpec t = Tensor(num_blocks, piece, piece, 0);
      t.layer = layer;
      t.kv_index = kv;
      g.spec.tensors.push_back(t);
      g.block_bytes += piece;
    }
  }
  return g;
}

KvGeometry CrossLayerGeometry(uint32_t num_blocks, uint64_t padding) {
  KvGeometry g{"cross-layer", {}, 2048 * kKiB};
  g.spec.num_blocks = num_blocks;
  g.spec.tensors.push_back(Tensor(num_blocks, g.block_bytes, g.block_bytes + padding, padding));
  return g;
}

KvGeometry UnalignedGeometry(uint32_t num_blocks) {
  KvGeometry g{"unaligned", {}, 0};
  g.spec.num_blocks = num_blocks;
  for (uint64_t piece : {1000, 4099, 17, 70001}) {
    g.spec.tensors.push_back(Tensor(num_blocks, piece, piece + 3, 5));
    g.block_bytes += piece;
  }
  return g;
}

GpuKvCache::GpuKvCache(const KvGeometry& geometry) : geometry_(geometry) {
  for (const CudaTensorSpec& t : geometry_.spec.tensors) {
    void* p = nullptr;
    if (cudaMalloc(&p, t.allocation_bytes) != cudaSuccess) return;
    allocations_.push_back(p);
    mirror_.emplace_back(t.allocation_bytes, 0);
  }
}

GpuKvCache::~GpuKvCache() {
  for (void* p : allocations_) cudaFree(p);
}

void GpuKvCache::FillRandom(std::mt19937_64& rng) {
  for (size_t i = 0; i < mirror_.size(); ++i) {
    std::vector<uint8_t>& m = mirror_[i];
    for (size_t j = 0; j + 8 <= m.size(); j += 8) {
      uint64_t v = rng();
      std::memcpy(&m[j], &v, 8);
    }
    for (size_t j = m.size() / 8 * 8; j < m.size(); ++j) m[j] = static_cast<uint8_t>(rng());
    cudaMemcpy(allocations_[i], m.data(), m.size(), cudaMemcpyHostToDevice);
  }
}

void GpuKvCache::Poison(uint8_t value) {
  for (size_t i = 0; i < mirror_.size(); ++i) {
    std::fill(mirror_[i].begin(), mirror_[i].end(), value);
    cudaMemset(allocations_[i], value, mirror_[i].size());
  }
  cudaDeviceSynchronize();
}

std::vector<uint8_t> GpuKvCache::ExpectedSlot(uint32_t block) const {
  std::vector<uint8_t> slot;
  for (size_t i = 0; i < mirror_.size(); ++i) {
    const CudaTensorSpec& t = geometry_.spec.tensors[i];
    const uint8_t* piece = mirror_[i].data() + t.base_offset + block * t.block_stride;
    slot.insert(slot.end(), piece, piece + t.piece_bytes);
  }
  return slot;
}

void GpuKvCache::ApplyLoad(uint32_t block, const uint8_t* slot) {
  for (size_t i = 0; i < mirror_.size(); ++i) {
    const CudaTensorSpec& t = geometry_.spec.tensors[i];
    std::memcpy(mirror_[i].data() + t.base_offset + block * t.block_stride, slot, t.piece_bytes);
    slot += t.piece_bytes;
  }
}

std::string GpuKvCache::Verify() const {
  for (size_t i = 0; i < mirror_.size(); ++i) {
    std::vector<uint8_t> actual(mirror_[i].size());
    cudaError_t error =
        cudaMemcpy(actual.data(), allocations_[i], actual.size(), cudaMemcpyDeviceToHost);
    if (error != cudaSuccess) return absl::StrCat("cudaMemcpy: ", cudaGetErrorString(error));
    auto diff = std::mismatch(actual.begin(), actual.end(), mirror_[i].begin());
    if (diff.first != actual.end()) {
      const CudaTensorSpec& t = geometry_.spec.tensors[i];
      uint64_t offset = diff.first - actual.begin();
      return absl::StrCat("tensor ", i, " byte ", offset, " (block ~",
                          (offset - std::min(offset, t.base_offset)) / t.block_stride, ")");
    }
  }
  return "";
}

HostRegion::HostRegion(uint64_t bytes) : bytes_((bytes + 4095) / 4096 * 4096) {
  data_ = static_cast<uint8_t*>(std::aligned_alloc(4096, bytes_));
  std::memset(data_, 0, bytes_);
}

HostRegion::~HostRegion() { std::free(data_); }

std::function<void(TransferResult)> Waiter::Callback() {
  std::lock_guard<std::mutex> lock(mu_);
  ++pending_;
  return [this](TransferResult result) {
    std::lock_guard<std::mutex> lock(mu_);
    failed_ += result.failed.size();
    if (error_.empty()) error_ = result.error;
    --pending_;
    cv_.notify_all();
  };
}

void Waiter::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return pending_ == 0; });
}

}  // namespace kvstrata::gpu_test
