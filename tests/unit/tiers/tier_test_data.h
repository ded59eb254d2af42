// Test data shared by the tiers tests: a namespace fingerprint, a key, and deterministic
// non-repeating payloads (xorshift32), so a swapped or shifted byte never goes unnoticed.
#ifndef KVSTRATA_TESTS_UNIT_TIERS_TIER_TEST_DATA_H_
#define KVSTRATA_TESTS_UNIT_TIERS_TIER_TEST_DATA_H_

#include <cstdint>
#include <string>

#include "daemon/namespaces/namespace_spec.h"

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

}  // namespace kvstrata

#endif  // KVSTRATA_TESTS_UNIT_TIERS_TIER_TEST_DATA_H_
