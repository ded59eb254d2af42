#include "daemon/index/block_key.h"

#include <xxhash.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kvstrata {

absl::StatusOr<BlockKey> BlockKey::Make(NamespaceId ns, std::string_view bytes) {
  if (bytes.empty()) return absl::InvalidArgumentError("block key is empty");
  if (bytes.size() > kMaxBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("block key has ", bytes.size(), " bytes; the limit is ", kMaxBytes));
  }
  BlockKey key;
  key.ns_ = ns;
  key.size_ = static_cast<uint8_t>(bytes.size());
  std::memcpy(key.bytes_.data(), bytes.data(), bytes.size());
  return key;
}

uint64_t BlockKey::Fingerprint() const { return XXH3_64bits_withSeed(bytes_.data(), size_, ns_); }

absl::StatusOr<std::vector<BlockKey>> MakeBlockKeys(NamespaceId ns,
                                                    absl::Span<const std::string_view> raw,
                                                    size_t max_keys) {
  if (raw.size() > max_keys) {
    return absl::InvalidArgumentError(
        absl::StrCat(raw.size(), " keys in one call; the limit is ", max_keys));
  }
  std::vector<BlockKey> keys(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i].empty() || raw[i].size() > BlockKey::kMaxBytes) {
      absl::StatusOr<BlockKey> key = BlockKey::Make(ns, raw[i]);  // for its message
      return absl::InvalidArgumentError(absl::StrCat("key ", i, ": ", key.status().message()));
    }
    BlockKey& key = keys[i];
    key.ns_ = ns;
    key.size_ = static_cast<uint8_t>(raw[i].size());
    std::memcpy(key.bytes_.data(), raw[i].data(), raw[i].size());
  }
  return keys;
}

}  // namespace kvstrata
