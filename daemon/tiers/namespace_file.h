// `<root>/<fingerprint>/namespace.json`: the namespace spec of a block tree, as a flat JSON
// object (every NamespaceSpec field, enums as their wire numbers, plus "format",
// "format_version", "block_file_format_version" and "fingerprint"). Lets a restarted
// daemon, another node or an operator see what a fingerprint directory holds.
// Free functions; thread-safe (writes are atomic renames of identical content).
#ifndef KVSTRATA_DAEMON_TIERS_NAMESPACE_FILE_H_
#define KVSTRATA_DAEMON_TIERS_NAMESPACE_FILE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/namespaces/namespace_spec.h"

namespace kvstrata {

inline constexpr absl::string_view kNamespaceFileFormat = "kvstrata-namespace";
inline constexpr int kNamespaceFileVersion = 1;

// The JSON text for `spec`. REQUIRES: spec passed ValidateAndNormalize.
std::string NamespaceToJson(const NamespaceSpec& spec);

// Parses and validates: every field present with the right type, format and versions
// known, the spec valid, and "fingerprint" equal to Fingerprint(spec). Unknown fields are
// ignored. INVALID_ARGUMENT (malformed) or DATA_LOSS (inconsistent) otherwise.
absl::StatusOr<NamespaceSpec> NamespaceFromJson(absl::string_view json);

// Validates `spec` and writes `<root>/<Fingerprint(spec)>/namespace.json` atomically
// (temp file, fsync, rename), creating directories. Returns the fingerprint.
absl::StatusOr<std::string> WriteNamespaceFile(absl::string_view root, NamespaceSpec spec);

// Reads `<root>/<fingerprint>/namespace.json`: NOT_FOUND when absent, DATA_LOSS when it
// does not parse, is invalid or describes another fingerprint.
absl::StatusOr<NamespaceSpec> ReadNamespaceFile(absl::string_view root,
                                                absl::string_view fingerprint);

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_TIERS_NAMESPACE_FILE_H_
