// Helpers for the GPU tests: KV cache geometries like vLLM's, cudaMalloc'ed tensors with
// a host mirror of what they must hold, a page-aligned L1 stand-in and a completion waiter.
#ifndef KVSTRATA_TESTS_GPU_GPU_KV_FIXTURE_H_
#define KVSTRATA_TESTS_GPU_GPU_KV_FIXTURE_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "daemon/transfer/transfer_engine.h"

namespace kvstrata::gpu_test {

bool HasCudaDevice();

struct KvGeometry {
  std::string name;
  CudaMemorySpec spec;
  uint64_t block_bytes = 0;
};

// Llama-3.1-8B in vLLM: 32 layers x {K, V}, 8 kv heads x 128 x bf16 x 16 tokens = 32 KiB
// pieces, 2 MiB blocks, blocks packed in each tensor.
KvGeometry PerLayerGeometry(uint32_t num_blocks);
// One tensor, one 2 MiB piece per block, with `padding` bytes between blocks and at the start.
KvGeometry CrossLayerGeometry(uint32_t num_blocks, uint64_t padding);
// Sizes that are not multiples of 16 and odd offsets (the kernel's byte path).
KvGeometry UnalignedGeometry(uint32_t num_blocks);

class GpuKvCache {
 public:
  explicit GpuKvCache(const KvGeometry& geometry);  // Allocations empty on failure.
  ~GpuKvCache();
  GpuKvCache(const GpuKvCache&) = delete;
  GpuKvCache& operator=(const GpuKvCache&) = delete;

  bool ok() const { return allocations_.size() == geometry_.spec.tensors.size(); }
  const std::vector<void*>& allocations() const { return allocations_; }
  void FillRandom(std::mt19937_64& rng);
  void Poison(uint8_t value);
  // The bytes a slot holds after storing `block` (from the mirror).
  std::vector<uint8_t> ExpectedSlot(uint32_t block) const;
  // Records in the mirror that `block` was loaded from `slot`.
  void ApplyLoad(uint32_t block, const uint8_t* slot);
  // "" when the GPU holds exactly the mirror, else where the first difference is.
  std::string Verify() const;

 private:
  KvGeometry geometry_;
  std::vector<void*> allocations_;
  std::vector<std::vector<uint8_t>> mirror_;
};

class HostRegion {
 public:
  explicit HostRegion(uint64_t bytes);
  ~HostRegion();
  uint8_t* data() const { return data_; }
  uint64_t size() const { return bytes_; }

 private:
  uint8_t* data_;
  uint64_t bytes_;
};

// Counts outstanding transfers and the blocks that failed.
class Waiter {
 public:
  std::function<void(TransferResult)> Callback();
  void Wait();
  size_t failed_blocks() const { return failed_; }
  const std::string& first_error() const { return error_; }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int pending_ = 0;
  size_t failed_ = 0;
  std::string error_;
};

}  // namespace kvstrata::gpu_test

#endif  // KVSTRATA_TESTS_GPU_GPU_KV_FIXTURE_H_
