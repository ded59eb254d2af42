#include "client/cpp/block_copy.h"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kvstrata {
namespace {

#if defined(__x86_64__)
// Streams `bytes` (a multiple of 128) from `src` to `dst` (32-byte aligned).
__attribute__((target("avx2"))) void StreamAvx2(char* dst, const char* src, size_t bytes) {
  for (size_t i = 0; i < bytes; i += 128) {
    __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 32));
    __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 64));
    __m256i d = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 96));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i), a);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 32), b);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 64), c);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 96), d);
  }
  _mm_sfence();
}

bool HasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}
#endif

}  // namespace

void StreamCopy(void* dst, const void* src, size_t bytes) {
#if defined(__x86_64__)
  if (bytes >= kStreamMinBytes && HasAvx2()) {
    char* d = static_cast<char*>(dst);
    const char* s = static_cast<const char*>(src);
    size_t head = (32 - reinterpret_cast<uintptr_t>(d) % 32) % 32;
    std::memcpy(d, s, head);
    size_t body = (bytes - head) / 128 * 128;
    StreamAvx2(d + head, s + head, body);
    std::memcpy(d + head + body, s + head + body, bytes - head - body);
    return;
  }
#endif
  std::memcpy(dst, src, bytes);
}

}  // namespace kvstrata

extern "C" void kvstrata_stream_copy_pieces(const uint64_t* triples, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    const uint64_t* piece = triples + 3 * i;
    kvstrata::StreamCopy(reinterpret_cast<void*>(piece[0]), reinterpret_cast<const void*>(piece[1]),
                         piece[2]);
  }
}
