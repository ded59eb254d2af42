// Where block files live on an L2/L3 tier:
//   <root>/<fingerprint>/<2 hex>/<2 hex>/<hex key>.kv
// The two prefix directories come from an XXH3-64 hash of the key, so sequential keys
// spread over 65536 directories. Pure functions; thread-safe.
#ifndef KVSTRATA_DAEMON_TIERS_BLOCK_PATH_H_
#define KVSTRATA_DAEMON_TIERS_BLOCK_PATH_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kvstrata {

inline constexpr absl::string_view kBlockFileSuffix = ".kv";
inline constexpr absl::string_view kNamespaceFileName = "namespace.json";
inline constexpr absl::string_view kQuarantineDirName = ".quarantine";

// INVALID_ARGUMENT unless `fingerprint` is 32 lowercase hex characters.
absl::Status ValidateFingerprint(absl::string_view fingerprint);
// INVALID_ARGUMENT unless `key` is 1..32 bytes.
absl::Status ValidateBlockKey(absl::string_view key);

// Lowercase hex of the key's bytes (2 characters per byte).
std::string HexKey(absl::string_view key);
// The key whose HexKey is `hex`; empty when `hex` is not one (empty, odd length, more than
// 64 characters, anything but lowercase hex digits).
std::string KeyOfHex(absl::string_view hex);

// `<root>/<fingerprint>`; INVALID_ARGUMENT for an empty root or a bad fingerprint.
absl::StatusOr<std::string> NamespaceDir(absl::string_view root, absl::string_view fingerprint);

// `<root>/<fingerprint>/namespace.json`.
absl::StatusOr<std::string> NamespaceFilePath(absl::string_view root,
                                              absl::string_view fingerprint);

// `<root>/<fingerprint>/<2 hex>/<2 hex>/<hex key>.kv`.
absl::StatusOr<std::string> BlockFilePath(absl::string_view root, absl::string_view fingerprint,
                                          absl::string_view key);

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_TIERS_BLOCK_PATH_H_
