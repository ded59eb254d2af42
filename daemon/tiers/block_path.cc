#include "daemon/tiers/block_path.h"

#include <xxhash.h>

#include <cstdint>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "daemon/tiers/block_file_format.h"

namespace kvstrata {
namespace {

constexpr char kHex[] = "0123456789abcdef";

std::string HexByte(uint64_t byte) {
  return std::string{kHex[(byte >> 4) & 0xf], kHex[byte & 0xf]};
}

absl::string_view TrimTrailingSlashes(absl::string_view root) {
  while (root.size() > 1 && root.back() == '/') root.remove_suffix(1);
  return root;
}

}  // namespace

absl::Status ValidateFingerprint(absl::string_view fingerprint) {
  return ParseFingerprint(fingerprint).status();
}

absl::Status ValidateBlockKey(absl::string_view key) {
  if (key.empty() || key.size() > kMaxBlockKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("block key must be 1..", kMaxBlockKeyBytes, " bytes, got ", key.size()));
  }
  return absl::OkStatus();
}

std::string HexKey(absl::string_view key) {
  std::string out;
  out.reserve(key.size() * 2);
  for (char c : key) out += HexByte(static_cast<uint8_t>(c));
  return out;
}

std::string KeyOfHex(absl::string_view hex) {
  if (hex.empty() || hex.size() > 64 || hex.size() % 2 != 0) return "";
  for (char c : hex) {
    if (!absl::ascii_isxdigit(c) || absl::ascii_isupper(c)) return "";
  }
  return absl::HexStringToBytes(hex);
}

absl::StatusOr<std::string> NamespaceDir(absl::string_view root, absl::string_view fingerprint) {
  if (root.empty()) return absl::InvalidArgumentError("tier root is empty");
  if (absl::Status status = ValidateFingerprint(fingerprint); !status.ok()) return status;
  root = TrimTrailingSlashes(root);
  return root == "/" ? absl::StrCat("/", fingerprint) : absl::StrCat(root, "/", fingerprint);
}

absl::StatusOr<std::string> NamespaceFilePath(absl::string_view root,
                                              absl::string_view fingerprint) {
  absl::StatusOr<std::string> dir = NamespaceDir(root, fingerprint);
  if (!dir.ok()) return dir.status();
  return absl::StrCat(*dir, "/", kNamespaceFileName);
}

absl::StatusOr<std::string> BlockFilePath(absl::string_view root, absl::string_view fingerprint,
                                          absl::string_view key) {
  absl::StatusOr<std::string> dir = NamespaceDir(root, fingerprint);
  if (!dir.ok()) return dir.status();
  if (absl::Status status = ValidateBlockKey(key); !status.ok()) return status;
  const uint64_t hash = XXH3_64bits(key.data(), key.size());
  return absl::StrCat(*dir, "/", HexByte(hash >> 56), "/", HexByte(hash >> 48), "/", HexKey(key),
                      kBlockFileSuffix);
}

}  // namespace kvstrata
