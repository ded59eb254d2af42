// CudaTransferEngine on a real GPU: stores of random block sets into L1 slots, loads back
// into other (poisoned) blocks, byte-exact checks of the whole GPU memory, stores and
// loads in flight together, for every copy strategy and several geometries.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>

#include "daemon/transfer/copy_calibration.h"
#include "daemon/transfer/cuda_transfer_engine.h"
#include "daemon/transfer/transfer_validation.h"
#include "gtest/gtest.h"
#include "tests/gpu/gpu_kv_fixture.h"

namespace kvstrata::gpu_test {
namespace {

constexpr uint64_t kSession = 7;
constexpr uint32_t kBlocks = 48;
constexpr uint32_t kSlots = 48;
constexpr int kRounds = 12;

#define SKIP_WITHOUT_GPU() \
  if (!HasCudaDevice()) GTEST_SKIP() << "no CUDA device: GPU tests skipped"

struct Fixture {
  Fixture(const KvGeometry& g, CopyStrategy strategy)
      : geometry(g), cache(g), region(kSlots * g.block_bytes) {
    TransferEngineOptions options;
    options.host_base = region.data();
    options.host_bytes = region.size();
    options.copy_strategy = strategy;
    auto created = CudaTransferEngine::CreateCuda(options);
    if (created.ok()) engine = std::move(*created);
    status = created.status();
  }
  KvGeometry geometry;
  GpuKvCache cache;
  HostRegion region;
  absl::Status status;
  std::unique_ptr<CudaTransferEngine> engine;
  uint64_t registration = 0;
};

std::unique_ptr<Fixture> MakeFixture(const KvGeometry& g, CopyStrategy strategy) {
  auto f = std::make_unique<Fixture>(g, strategy);
  if (!f->cache.ok() || !f->engine) return nullptr;
  auto reg = f->engine->RegisterLocalForTesting(kSession, 0, g.spec, f->cache.allocations(),
                                                g.block_bytes);
  if (!reg.ok()) return nullptr;
  f->registration = *reg;
  return f;
}

void SubmitTo(Fixture& f, CopyDirection direction, std::vector<BlockCopy> blocks, Waiter& waiter) {
  TransferRequest request{f.registration, direction, std::move(blocks), std::nullopt};
  std::function<void(TransferResult)> done = waiter.Callback();
  absl::Status status = f.engine->Submit(kSession, request, done);
  if (!status.ok()) done({{0}, std::string("Submit: ") + std::string(status.message())});
}

// `count` distinct values from [begin, end), shuffled, or (`run`) consecutive ones from a
// random start.
std::vector<uint32_t> Pick(std::mt19937_64& rng, uint32_t begin, uint32_t end, uint32_t count,
                           bool run = false) {
  std::vector<uint32_t> all(end - begin);
  std::iota(all.begin(), all.end(), begin);
  if (run) {
    std::rotate(all.begin(), all.begin() + rng() % (end - begin - count + 1), all.end());
  } else {
    std::shuffle(all.begin(), all.end(), rng);
  }
  all.resize(count);
  return all;
}

class TransferGpuTest : public testing::TestWithParam<CopyStrategy> {};

// Stores random blocks into random slots, checks the slots, poisons the GPU, loads the
// slots into other blocks, checks every GPU byte. Every third round takes runs instead:
// consecutive blocks into consecutive slots, loaded into consecutive blocks (2-D copies).
void StoreLoadRounds(const KvGeometry& geometry, CopyStrategy strategy) {
  std::unique_ptr<Fixture> f = MakeFixture(geometry, strategy);
  ASSERT_NE(f, nullptr) << "setup failed";
  std::mt19937_64 rng(42);
  uint64_t moved = 0;
  for (int round = 0; round < kRounds; ++round) {
    f->cache.FillRandom(rng);
    const bool runs = round % 3 == 2;
    std::vector<uint32_t> blocks = Pick(rng, 0, kBlocks, 1 + rng() % kBlocks, runs);
    std::vector<uint32_t> slots = Pick(rng, 0, kSlots, blocks.size(), runs);
    std::vector<BlockCopy> copies;
    for (size_t i = 0; i < blocks.size(); ++i)
      copies.push_back({blocks[i], slots[i] * geometry.block_bytes});
    Waiter stored;
    SubmitTo(*f, CopyDirection::kDown, copies, stored);
    stored.Wait();
    ASSERT_EQ(stored.failed_blocks(), 0u) << stored.first_error();
    for (size_t i = 0; i < blocks.size(); ++i) {
      std::vector<uint8_t> expected = f->cache.ExpectedSlot(blocks[i]);
      ASSERT_EQ(
          std::memcmp(f->region.data() + copies[i].host_offset, expected.data(), expected.size()),
          0)
          << "round " << round << ": slot " << slots[i] << " differs from block " << blocks[i];
    }
    f->cache.Poison(0xAB);
    std::vector<uint32_t> targets = Pick(rng, 0, kBlocks, blocks.size(), runs);
    std::vector<BlockCopy> loads;
    for (size_t i = 0; i < targets.size(); ++i) {
      loads.push_back({targets[i], copies[i].host_offset});
      f->cache.ApplyLoad(targets[i], f->region.data() + copies[i].host_offset);
    }
    Waiter loaded;
    SubmitTo(*f, CopyDirection::kUp, loads, loaded);
    loaded.Wait();
    ASSERT_EQ(loaded.failed_blocks(), 0u) << loaded.first_error();
    ASSERT_EQ(f->cache.Verify(), "") << "round " << round;
    moved += 2 * blocks.size() * geometry.block_bytes;
  }
  std::printf("[ data     ] %-12s %-7s %3d rounds, %.1f MiB moved, byte-exact\n",
              geometry.name.c_str(), CopyStrategyName(strategy), kRounds, moved / 1048576.0);
  testing::Test::RecordProperty("bytes_moved", std::to_string(moved));
}

TEST_P(TransferGpuTest, PerLayerRoundTrip) {
  SKIP_WITHOUT_GPU();
  StoreLoadRounds(PerLayerGeometry(kBlocks), GetParam());
}

TEST_P(TransferGpuTest, CrossLayerRoundTrip) {
  SKIP_WITHOUT_GPU();
  StoreLoadRounds(CrossLayerGeometry(kBlocks, 4096), GetParam());
}

TEST_P(TransferGpuTest, UnalignedRoundTrip) {
  SKIP_WITHOUT_GPU();
  StoreLoadRounds(UnalignedGeometry(kBlocks), GetParam());
}

// Stores from blocks [0, 24) into slots [0, 24) while loads fill blocks [24, 48) from
// slots [24, 48), several transfers of each in flight.
TEST_P(TransferGpuTest, ConcurrentStoresAndLoads) {
  SKIP_WITHOUT_GPU();
  KvGeometry geometry = PerLayerGeometry(kBlocks);
  std::unique_ptr<Fixture> f = MakeFixture(geometry, GetParam());
  ASSERT_NE(f, nullptr);
  std::mt19937_64 rng(7);
  const uint32_t half = kBlocks / 2;
  for (int round = 0; round < kRounds; ++round) {
    f->cache.FillRandom(rng);
    for (uint64_t i = 0; i < f->region.size(); i += 8) {
      uint64_t v = rng();
      std::memcpy(f->region.data() + i, &v, 8);
    }
    std::vector<uint32_t> src = Pick(rng, 0, half, half);
    std::vector<uint32_t> dst = Pick(rng, half, kBlocks, half);
    std::vector<std::vector<uint8_t>> expected;
    for (uint32_t b : src) expected.push_back(f->cache.ExpectedSlot(b));
    Waiter waiter;
    for (uint32_t part = 0; part < 4; ++part) {
      std::vector<BlockCopy> stores;
      std::vector<BlockCopy> loads;
      for (uint32_t i = part; i < half; i += 4) {
        stores.push_back({src[i], uint64_t{i} * geometry.block_bytes});
        uint64_t slot = uint64_t{half + i} * geometry.block_bytes;
        loads.push_back({dst[i], slot});
        f->cache.ApplyLoad(dst[i], f->region.data() + slot);
      }
      SubmitTo(*f, CopyDirection::kDown, stores, waiter);
      SubmitTo(*f, CopyDirection::kUp, loads, waiter);
    }
    waiter.Wait();
    ASSERT_EQ(waiter.failed_blocks(), 0u) << waiter.first_error();
    for (uint32_t i = 0; i < half; ++i) {
      ASSERT_EQ(std::memcmp(f->region.data() + i * geometry.block_bytes, expected[i].data(),
                            expected[i].size()),
                0)
          << "round " << round << " slot " << i;
    }
    ASSERT_EQ(f->cache.Verify(), "") << "round " << round;
  }
}

INSTANTIATE_TEST_SUITE_P(Strategies, TransferGpuTest,
                         testing::Values(CopyStrategy::kBatch, CopyStrategy::kKernel,
                                         CopyStrategy::kMemcpyLoop, CopyStrategy::kStaged,
                                         CopyStrategy::kAuto),
                         [](const testing::TestParamInfo<CopyStrategy>& info) {
                           return std::string(CopyStrategyName(info.param));
                         });

// A store waits for the event the engine recorded after writing the blocks.
// The start-up calibration measures every candidate and picks a threshold from its rows.
TEST(CopyCalibrationGpuTest, MeasuresEveryCandidate) {
  SKIP_WITHOUT_GPU();
  absl::StatusOr<CopyCalibration> c = CalibrateLoads(0, 32);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->rows.size(), CalibrationPieceSizes().size());
  for (const CalibrationRow& row : c->rows) {
    EXPECT_GT(row.dma_gbps, 0.5) << row.piece_bytes;
    EXPECT_GT(row.staged_gbps, 0.5) << row.piece_bytes;
  }
  EXPECT_EQ(c->staged_max_piece_bytes, ChooseStagedMaxPieceBytes(c->rows));
  std::printf("[ calib    ] %s\n", c->Summary().c_str());
}

TEST(TransferGpuEventTest, StoreWaitsForEvent) {
  SKIP_WITHOUT_GPU();
  KvGeometry geometry = CrossLayerGeometry(4, 0);
  auto f = std::make_unique<Fixture>(geometry, CopyStrategy::kAuto);
  ASSERT_TRUE(f->engine && f->cache.ok()) << f->status;
  cudaStream_t stream = nullptr;
  cudaEvent_t written = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaEventCreateWithFlags(&written, cudaEventDisableTiming), cudaSuccess);
  auto reg = f->engine->RegisterLocalForTesting(kSession, 0, geometry.spec, f->cache.allocations(),
                                                geometry.block_bytes, {written});
  ASSERT_TRUE(reg.ok()) << reg.status();
  for (int round = 0; round < 20; ++round) {
    uint8_t value = static_cast<uint8_t>(round + 1);
    cudaMemsetAsync(f->cache.allocations()[0], value, geometry.spec.tensors[0].allocation_bytes,
                    stream);
    cudaEventRecord(written, stream);
    Waiter waiter;
    std::function<void(TransferResult)> done = waiter.Callback();
    TransferRequest request{*reg, CopyDirection::kDown, {{3, 0}}, 0u};
    ASSERT_TRUE(f->engine->Submit(kSession, request, done).ok());
    waiter.Wait();
    ASSERT_EQ(waiter.failed_blocks(), 0u) << waiter.first_error();
    std::vector<uint8_t> expected(geometry.block_bytes, value);
    ASSERT_EQ(std::memcmp(f->region.data(), expected.data(), expected.size()), 0) << round;
  }
  f->engine->EndSession(kSession);
  cudaEventDestroy(written);
  cudaStreamDestroy(stream);
}

// A layer-wise load: once a layer's flag word holds the load's value, that layer's blocks
// are on the GPU (the daemon writes the word on its copy stream after the layer's copies,
// behind a memory barrier); the last layer's word is read here before the completion
// arrives, and every block is exact. The completion comes with no failure.
TEST(TransferGpuEventTest, LayeredLoadWritesEachLayerFlagAfterItsCopies) {
  SKIP_WITHOUT_GPU();
  KvGeometry geometry = PerLayerGeometry(kBlocks);
  auto f = std::make_unique<Fixture>(geometry, CopyStrategy::kAuto);
  ASSERT_TRUE(f->engine && f->cache.ok()) << f->status;
  constexpr size_t kLayers = 32;
  uint64_t* flags = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&flags), kLayers * 8), cudaSuccess);
  ASSERT_EQ(cudaMemset(flags, 0, kLayers * 8), cudaSuccess);
  auto reg = f->engine->RegisterLocalForTesting(kSession, 0, geometry.spec, f->cache.allocations(),
                                                geometry.block_bytes, {}, flags);
  ASSERT_TRUE(reg.ok()) << reg.status();
  std::mt19937_64 rng(7);
  for (uint64_t round = 1; round <= 6; ++round) {
    for (uint64_t i = 0; i < f->region.size(); i += 8) {
      uint64_t v = rng();
      std::memcpy(f->region.data() + i, &v, 8);
    }
    f->cache.Poison(0xCD);
    std::vector<uint32_t> targets = Pick(rng, 0, kBlocks, 1 + rng() % kBlocks);
    std::vector<BlockCopy> loads;
    for (size_t i = 0; i < targets.size(); ++i) {
      loads.push_back({targets[i], i * geometry.block_bytes});
      f->cache.ApplyLoad(targets[i], f->region.data() + i * geometry.block_bytes);
    }
    TransferRequest request{*reg, CopyDirection::kUp, loads, std::nullopt, round};
    Waiter waiter;
    std::function<void(TransferResult)> done = waiter.Callback();
    ASSERT_TRUE(f->engine->Submit(kSession, request, done).ok());
    uint64_t last = 0;
    for (int spin = 0; spin < 200000 && last != round; ++spin) {
      ASSERT_EQ(cudaMemcpy(&last, flags + kLayers - 1, 8, cudaMemcpyDeviceToHost), cudaSuccess);
    }
    ASSERT_EQ(last, round) << "the last layer's flag was never written";
    ASSERT_EQ(f->cache.Verify(), "") << "round " << round << ": read after the last layer flag";
    waiter.Wait();
    ASSERT_EQ(waiter.failed_blocks(), 0u) << waiter.first_error();
    std::vector<uint64_t> all(kLayers);
    ASSERT_EQ(cudaMemcpy(all.data(), flags, kLayers * 8, cudaMemcpyDeviceToHost), cudaSuccess);
    for (uint64_t v : all) ASSERT_EQ(v, round);
  }
  // A value of 0, and a store, are refused; so is a registration without flags.
  TransferRequest bad{*reg, CopyDirection::kUp, {{0, 0}}, std::nullopt, 0u};
  EXPECT_FALSE(f->engine->Submit(kSession, bad, [](TransferResult) {}).ok());
  bad.direction = CopyDirection::kDown;
  bad.layer_flag_value = 1u;
  EXPECT_FALSE(f->engine->Submit(kSession, bad, [](TransferResult) {}).ok());
  f->engine->EndSession(kSession);
  cudaFree(flags);
}

TEST(TransferGpuErrorsTest, BadRequestsAndSessions) {
  SKIP_WITHOUT_GPU();
  KvGeometry geometry = PerLayerGeometry(4);
  std::unique_ptr<Fixture> f = MakeFixture(geometry, CopyStrategy::kAuto);
  ASSERT_NE(f, nullptr);
  auto noop = [](TransferResult) {};
  TransferRequest bad{f->registration, CopyDirection::kUp, {{4, 0}}, std::nullopt};
  EXPECT_EQ(f->engine->Submit(kSession, bad, noop).code(), absl::StatusCode::kInvalidArgument);
  bad.blocks = {{0, f->region.size()}};
  EXPECT_EQ(f->engine->Submit(kSession, bad, noop).code(), absl::StatusCode::kInvalidArgument);
  TransferRequest good{f->registration, CopyDirection::kUp, {{0, 0}}, std::nullopt};
  EXPECT_EQ(f->engine->Submit(kSession + 1, good, noop).code(),
            absl::StatusCode::kFailedPrecondition);
  CudaMemorySpec spec = geometry.spec;
  spec.gpu_uuid = "GPU-not-here";
  spec.tensors[0].ipc_handle[0] = 1;
  for (auto& t : spec.tensors) t.ipc_handle[0] = 1;
  EXPECT_EQ(f->engine->Register(kSession, spec, geometry.block_bytes).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(f->engine->Register(kSession, spec, geometry.block_bytes + 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  Waiter waiter;
  SubmitTo(*f, CopyDirection::kDown, {{1, 0}, {2, geometry.block_bytes}}, waiter);
  f->engine->EndSession(kSession);  // Waits for the store above.
  waiter.Wait();
  EXPECT_EQ(waiter.failed_blocks(), 0u);
  EXPECT_EQ(f->engine->Submit(kSession, good, noop).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(f->engine->Unregister(kSession, f->registration).code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace kvstrata::gpu_test
