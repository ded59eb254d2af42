// The workload shared by cache_throughput and event_overhead: chains of kChain 32-byte keys
// (chain n is distinct from every other chain) of kBlock-byte blocks.
#ifndef KVSTRATA_BENCH_CORE_STORE_CHAIN_H_
#define KVSTRATA_BENCH_CORE_STORE_CHAIN_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

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

}  // namespace kvstrata::bench

#endif  // KVSTRATA_BENCH_CORE_STORE_CHAIN_H_
