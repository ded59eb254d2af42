// The workload shared by cache_throughput and event_overhead: chains of kChain 32-byte keys
// (chain n is distinct from every other chain) of kBlock-byte blocks, each stored, looked
// up with a lease and loaded once (StoreThenLoad).
#ifndef KVSTRATA_BENCH_CORE_STORE_CHAIN_H_
#define KVSTRATA_BENCH_CORE_STORE_CHAIN_H_

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/time/time.h"
#include "daemon/cache/block_cache.h"

namespace kvstrata::bench {

inline constexpr int kChain = 16;
inline constexpr uint64_t kBlock = 256 << 10;

inline std::vector<std::string> Chain(uint64_t n) {
  std::vector<std::string> keys;
  for (int i = 0; i < kChain; ++i) {
    std::string k(32, '\0');
    uint64_t v[2] = {n, static_cast<uint64_t>(i)};
    std::memcpy(k.data(), v, sizeof(v));
    keys.push_back(std::move(k));
  }
  return keys;
}

// ReserveStore + CommitStore of chain n, then a leased Lookup, AcquireLoad and ReleaseLoad.
inline void StoreThenLoad(BlockCache& cache, uint64_t n) {
  std::vector<std::string> names = Chain(n);
  std::vector<std::string_view> views(names.begin(), names.end());
  ReserveResult r = *cache.ReserveStore(1, 1, kBlock, views);
  if (r.reservation != 0) (void)cache.CommitStore(1, r.reservation, std::nullopt);
  LookupResult l = *cache.Lookup(1, 1, views, absl::Seconds(5));
  LoadResult load = *cache.AcquireLoad(1, 1, views, l.lease);
  if (load.load != 0) (void)cache.ReleaseLoad(1, load.load);
}

}  // namespace kvstrata::bench

#endif  // KVSTRATA_BENCH_CORE_STORE_CHAIN_H_
