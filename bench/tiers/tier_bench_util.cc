#include "bench/tiers/tier_bench_util.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>

#include "daemon/namespaces/namespace_spec.h"

namespace kvstrata::bench {

void FreeDeleter::operator()(char* p) const { std::free(p); }

AlignedBuffer AllocateAligned(size_t bytes) {
  constexpr size_t kPage = 4096;
  const size_t rounded = (bytes + kPage - 1) / kPage * kPage;
  void* raw = nullptr;
  if (::posix_memalign(&raw, kPage, rounded == 0 ? kPage : rounded) != 0) throw std::bad_alloc();
  std::memset(raw, 0, rounded);
  return AlignedBuffer(static_cast<char*>(raw));
}

absl::StatusOr<TierNamespace> BenchNamespace(uint64_t block_bytes, const std::string& salt) {
  NamespaceSpec spec;
  spec.engine_kind = EngineKind::kOther;
  spec.model = "kvstrata-bench";
  spec.dtype = DType::kUint8;
  spec.num_layers = 1;
  spec.num_kv_heads = 1;
  spec.head_size = 1;
  spec.tokens_per_block = 16;
  spec.kv_layout = KvLayout::kOpaque;
  spec.opaque_block_bytes = block_bytes;
  spec.salt = salt;
  if (absl::Status s = ValidateAndNormalize(spec); !s.ok()) return s;
  TierNamespace ns;
  ns.fingerprint = Fingerprint(spec);
  ns.payload_bytes = BytesPerBlock(spec);
  ns.spec = std::move(spec);
  return ns;
}

std::string BenchKey(uint64_t stream, uint64_t index) {
  std::string key(32, '\0');
  const uint64_t words[4] = {stream, index, stream ^ 0x9e3779b97f4a7c15ull,
                             index * 0xbf58476d1ce4e5b9ull};
  std::memcpy(key.data(), words, sizeof(words));
  return key;
}

void FillPayload(const std::string& key, char* out, size_t bytes) {
  uint64_t state = 0;
  std::memcpy(&state, key.data() + 8, sizeof(state));
  state ^= 0x243f6a8885a308d3ull;
  for (size_t i = 0; i < bytes; i += sizeof(uint64_t)) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    std::memcpy(out + i, &state, std::min(sizeof(state), bytes - i));
  }
}

double MonotonicSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace kvstrata::bench
