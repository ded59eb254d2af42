// Reads a small secret or credential file named by a config key (token, certificate, key).
// Blocks on file I/O. Thread-safe.
#ifndef KVSTRATA_DAEMON_COMMON_SECRET_FILE_H_
#define KVSTRATA_DAEMON_COMMON_SECRET_FILE_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace kvstrata {

// The file's whole text; INVALID_ARGUMENT naming `key` (e.g. "server.auth_token_file") when
// it is missing, unreadable or blank.
absl::StatusOr<std::string> ReadSecretFile(const std::string& path, std::string_view key);

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_COMMON_SECRET_FILE_H_
