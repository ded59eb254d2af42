// job_path: the daemon's CPU cost of one engine job of 512 blocks (an 8K-token request)
// outside its copies: JobManager::SubmitLoad (pin) / SubmitStore (reserve), the completion
// (unpin / commit), over the daemon's L1 stack (BlockStore over a PartitionedCache of one
// BlockCache, a TierManager with no lower tiers as its listener) and a TransferEngine that
// completes each job at once on the calling thread. Baseline: BlockIndex::Find of the same
// 512 keys, in the same run. The pool is a 20 GiB SlabAllocator (offsets only; no memory
// touched) of 576 KiB blocks (MLA: 32 layers x 18 KiB).
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "benchmark/benchmark.h"
#include "daemon/cache/block_cache.h"
#include "daemon/cache/partitioned_cache.h"
#include "daemon/index/block_index.h"
#include "daemon/jobs/job_manager.h"
#include "daemon/namespaces/namespace_registry.h"
#include "daemon/pool/slab_allocator.h"
#include "daemon/store/block_store.h"
#include "daemon/tiering/tier_manager.h"
#include "tests/unit/tiers/tier_test_data.h"

namespace kvstrata {
namespace {

constexpr uint64_t kBlockBytes = 576 << 10;
constexpr size_t kBlocks = 512;
constexpr SessionId kSession = 7;

// Completes every job at once, on the submitting thread.
class InstantEngine : public TransferEngine {
 public:
  absl::StatusOr<uint64_t> Register(uint64_t, const CudaMemorySpec&, uint64_t) override {
    return 1;
  }
  absl::Status Unregister(uint64_t, uint64_t) override { return absl::OkStatus(); }
  void EndSession(uint64_t) override {}
  absl::Status Submit(uint64_t, TransferRequest,
                      std::function<void(TransferResult)> done) override {
    done(TransferResult{});
    return absl::OkStatus();
  }
};

std::vector<std::string> RandomKeys(std::mt19937_64& gen, size_t n) {
  std::vector<std::string> keys(n, std::string(32, '\0'));
  for (std::string& k : keys) {
    for (char& c : k) c = static_cast<char>(gen());
  }
  return keys;
}

// The daemon's L1 stack and a JobManager over it, with one registered namespace.
struct Stack {
  NamespaceRegistry namespaces;
  std::unique_ptr<SlabAllocator> allocator;
  std::unique_ptr<TierManager> tiers;
  std::unique_ptr<BlockCache> cache;
  std::unique_ptr<PartitionedCache> l1;
  std::unique_ptr<BlockStore> store;
  InstantEngine engine;
  std::unique_ptr<JobManager> jobs;
  NamespaceId ns = 0;
  RegistrationId registration = 0;

  Stack() {
    ns = namespaces.Register(kSession, OpaqueTestSpec(kBlockBytes, "job-path"))->id;
    allocator = *SlabAllocator::Create({.region_bytes = 20ull << 30});
    tiers = std::make_unique<TierManager>(&namespaces, absl::Milliseconds(100));
    BlockCacheOptions options;
    options.listener = tiers.get();
    cache = *BlockCache::Create(allocator.get(), options);
    l1 = std::make_unique<PartitionedCache>(
        std::vector<PartitionedCache::Partition>{{cache.get(), 0, 20ull << 30}});
    tiers->AttachL1(l1.get(), nullptr);
    store = std::make_unique<BlockStore>(l1.get(), tiers.get(), BlockStoreOptions{});
    jobs = std::make_unique<JobManager>(store.get(), &engine, absl::OkStatus());
    jobs->OpenSession(kSession);
    registration = *jobs->RegisterCuda(kSession, ns, kBlockBytes, CudaMemorySpec{});
  }
  ~Stack() {
    jobs.reset();
    tiers->Stop();
  }

  JobBlocks Blocks(const std::vector<std::string>& keys) const {
    JobBlocks b;
    for (size_t i = 0; i < keys.size(); ++i) {
      b.keys.emplace_back(keys[i]);
      b.block_ids.push_back(static_cast<uint32_t>(i));
    }
    return b;
  }
};

void BM_IndexFind(benchmark::State& state) {
  std::mt19937_64 gen(1);
  std::vector<std::string> names = RandomKeys(gen, kBlocks);
  BlockIndex index;
  std::vector<BlockKey> keys;
  for (const std::string& s : names) keys.push_back(*BlockKey::Make(1, s));
  BlockEntry e;
  e.tiers = TierBit(Tier::kL1);
  for (const BlockKey& k : keys) index.Insert(k, e);
  for (auto _ : state) {
    for (const BlockKey& k : keys) benchmark::DoNotOptimize(index.Find(k));
  }
  state.SetItemsProcessed(state.iterations() * kBlocks);
}
BENCHMARK(BM_IndexFind);

void BM_LoadJob(benchmark::State& state) {
  Stack s;
  std::mt19937_64 gen(1);
  std::vector<std::string> keys = RandomKeys(gen, kBlocks);
  JobBlocks blocks = s.Blocks(keys);
  (void)*s.jobs->SubmitStore(kSession, s.ns, kBlockBytes, s.registration, blocks, std::nullopt);
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        s.jobs->SubmitLoad(kSession, s.ns, s.registration, blocks, std::nullopt));
  }
  state.SetItemsProcessed(state.iterations() * kBlocks);
}
BENCHMARK(BM_LoadJob);

void BM_StoreJob(benchmark::State& state) {
  Stack s;
  std::mt19937_64 gen(1);
  for (auto _ : state) {
    state.PauseTiming();
    std::vector<std::string> keys = RandomKeys(gen, kBlocks);
    JobBlocks blocks = s.Blocks(keys);
    state.ResumeTiming();
    benchmark::DoNotOptimize(
        s.jobs->SubmitStore(kSession, s.ns, kBlockBytes, s.registration, blocks, std::nullopt));
    state.PauseTiming();
    (void)s.store->Evict(s.ns, blocks.keys, TierSelection{});
    state.ResumeTiming();
  }
  state.SetItemsProcessed(state.iterations() * kBlocks);
}
BENCHMARK(BM_StoreJob);

}  // namespace
}  // namespace kvstrata

BENCHMARK_MAIN();
