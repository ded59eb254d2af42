// cache_throughput: host-mode control path of BlockCache — ReserveStore + CommitStore +
// leased Lookup + AcquireLoad + ReleaseLoad of 16-block chains — beside the bare
// BlockIndex insert + prefix lookup of the same keys (the baseline), both in this run.
// The pool is a 4 GiB SlabAllocator of 256 KiB blocks (offsets only; no memory touched),
// so the cache evicts all along.
#include <cstring>
#include <string>
#include <vector>

#include "bench/core/store_chain.h"
#include "benchmark/benchmark.h"
#include "daemon/cache/block_cache.h"

namespace kvstrata {
namespace {

using bench::Chain;
using bench::kBlock;
using bench::kChain;
using bench::StoreThenLoad;

void BM_IndexBaseline(benchmark::State& state) {
  BlockIndex index;
  BlockEntry e;
  e.tiers = TierBit(Tier::kL1);
  uint64_t n = 0;
  for (auto _ : state) {
    std::vector<std::string> names = Chain(n++);
    std::vector<BlockKey> keys;
    for (const std::string& s : names) keys.push_back(*BlockKey::Make(1, s));
    for (const BlockKey& k : keys) index.Insert(k, e);
    benchmark::DoNotOptimize(index.LongestPrefix(keys));
  }
  state.SetItemsProcessed(state.iterations() * kChain);
}
BENCHMARK(BM_IndexBaseline);

void BM_StoreThenLoad(benchmark::State& state) {
  auto allocator = *SlabAllocator::Create({.region_bytes = 4ull << 30});
  BlockCacheOptions options;
  options.eviction_policy = state.range(0) == 0 ? "lru" : state.range(0) == 1 ? "arc" : "s3fifo";
  auto cache = *BlockCache::Create(allocator.get(), options);
  uint64_t n = 0;
  for (auto _ : state) StoreThenLoad(*cache, n++);
  state.SetItemsProcessed(state.iterations() * kChain);
  state.SetLabel(options.eviction_policy);
}
BENCHMARK(BM_StoreThenLoad)->Arg(0)->Arg(1)->Arg(2);

}  // namespace
}  // namespace kvstrata

BENCHMARK_MAIN();
