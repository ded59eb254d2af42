// Test data shared by the tiers tests: a namespace fingerprint, a key, deterministic
// non-repeating payloads (xorshift32), so a swapped or shifted byte never goes unnoticed,
// and the options of a small FileTier.
#ifndef KVSTRATA_TESTS_UNIT_TIERS_TIER_TEST_DATA_H_
#define KVSTRATA_TESTS_UNIT_TIERS_TIER_TEST_DATA_H_

#include <cstdint>
#include <string>

#include "daemon/namespaces/namespace_spec.h"
#include "daemon/tiers/file_tier.h"

namespace kvstrata {

inline constexpr char kFp[] = "0123456789abcdef0123456789abcdef";
inline constexpr char kKey[] = "block-key";

inline std::string Payload(size_t size, int seed) {
  std::string out(size, '\0');
  uint32_t x = 2463534242u + static_cast<uint32_t>(seed);
  for (char& c : out) {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    c = static_cast<char>(x);
  }
  return out;
}

// A valid opaque namespace of `block_bytes` per block (normalized, ready to fingerprint).
inline NamespaceSpec OpaqueTestSpec(uint64_t block_bytes, std::string model) {
  NamespaceSpec spec;
  spec.engine_kind = EngineKind::kOther;
  spec.model = std::move(model);
  spec.kv_layout = KvLayout::kOpaque;
  spec.dtype = DType::kUint8;
  spec.opaque_block_bytes = block_bytes;
  spec.tokens_per_block = 16;
  (void)ValidateAndNormalize(spec);
  return spec;
}

// A 64 MiB FileTier at `root`: local (L2) or shared (L3). Access times are recorded on
// every hit and the shared tier trims only when a test calls EnforceSharedCapacity.
inline FileTierOptions TestFileTierOptions(const std::string& root, bool shared) {
  FileTierOptions o;
  o.name = shared ? "l3" : "l2";
  o.tier = shared ? Tier::kL3 : Tier::kL2;
  o.root = root;
  o.capacity_bytes = 64 << 20;
  o.shared = shared;
  o.access_record_interval = absl::ZeroDuration();
  o.shared_eviction_interval = absl::Hours(1);
  return o;
}

}  // namespace kvstrata

#endif  // KVSTRATA_TESTS_UNIT_TIERS_TIER_TEST_DATA_H_
