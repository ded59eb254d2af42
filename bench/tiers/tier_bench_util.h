// Helpers shared by the L2/L3 tier benchmarks: page-aligned buffers, the opaque namespace
// the RPC benchmarks register (bench/rpc RegisterOpaqueNamespace) in its daemon-side form,
// the benchmarks' 32-byte keys, a block's deterministic payload, and a monotonic clock.
// Free functions; thread-safe.
#ifndef KVSTRATA_BENCH_TIERS_TIER_BENCH_UTIL_H_
#define KVSTRATA_BENCH_TIERS_TIER_BENCH_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "daemon/tiers/file_tier.h"

namespace kvstrata::bench {

struct FreeDeleter {
  void operator()(char* p) const;
};
using AlignedBuffer = std::unique_ptr<char, FreeDeleter>;

// `bytes` (rounded up to 4 KiB) of 4 KiB-aligned memory, every page written once.
AlignedBuffer AllocateAligned(size_t bytes);

// The namespace of testing::OpaqueSpec("kvstrata-bench", block_bytes, salt) as the daemon
// normalises it: what the tier files of a bench namespace are named after.
absl::StatusOr<TierNamespace> BenchNamespace(uint64_t block_bytes, const std::string& salt);

// Key `index` of `stream`: the same bytes as bench/rpc MakeKeys(stream, n)[index].
std::string BenchKey(uint64_t stream, uint64_t index);

// Fills `out` with bytes derived from `key` (the payload the generator writes for it).
void FillPayload(const std::string& key, char* out, size_t bytes);

double MonotonicSeconds();

}  // namespace kvstrata::bench

#endif  // KVSTRATA_BENCH_TIERS_TIER_BENCH_UTIL_H_
