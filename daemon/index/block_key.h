// BlockKey: the identity of one KV block — a namespace id plus the engine's own opaque
// block hash (1..32 bytes), stored inline (no heap allocation), hashable with absl::Hash.
//
// Thread safety: a value type; const methods may be called concurrently.
#ifndef KVSTRATA_DAEMON_INDEX_BLOCK_KEY_H_
#define KVSTRATA_DAEMON_INDEX_BLOCK_KEY_H_

#include <array>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "daemon/common/ids.h"

namespace kvstrata {

class BlockKey {
 public:
  static constexpr size_t kMaxBytes = 32;

  // An empty key in namespace 0; never a valid stored key.
  BlockKey() = default;

  // INVALID_ARGUMENT when `bytes` is empty or longer than kMaxBytes.
  static absl::StatusOr<BlockKey> Make(NamespaceId ns, std::string_view bytes);

  NamespaceId ns() const { return ns_; }
  std::string_view bytes() const { return {reinterpret_cast<const char*>(bytes_.data()), size_}; }
  size_t size() const { return size_; }

  // 64-bit fingerprint of (ns, bytes); stable within one process build.
  uint64_t Fingerprint() const;

  friend bool operator==(const BlockKey& a, const BlockKey& b) {
    return a.ns_ == b.ns_ && a.size_ == b.size_ &&
           std::memcmp(a.bytes_.data(), b.bytes_.data(), a.size_) == 0;
  }

  template <typename H>
  friend H AbslHashValue(H h, const BlockKey& k) {
    return H::combine(std::move(h), k.Fingerprint());
  }

 private:
  friend absl::StatusOr<std::vector<BlockKey>> MakeBlockKeys(NamespaceId ns,
                                                             absl::Span<const std::string_view> raw,
                                                             size_t max_keys);

  NamespaceId ns_ = 0;
  uint8_t size_ = 0;
  std::array<uint8_t, kMaxBytes> bytes_{};
};

// Validates and converts a chain of raw keys: INVALID_ARGUMENT for an empty or too long
// key (the message names its position) or more than `max_keys` keys.
absl::StatusOr<std::vector<BlockKey>> MakeBlockKeys(NamespaceId ns,
                                                    absl::Span<const std::string_view> raw,
                                                    size_t max_keys);

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_INDEX_BLOCK_KEY_H_
