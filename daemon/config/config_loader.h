// Loads and validates the configuration. Thread-compatible (pure functions).
#ifndef KVSTRATA_DAEMON_CONFIG_CONFIG_LOADER_H_
#define KVSTRATA_DAEMON_CONFIG_CONFIG_LOADER_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/config/config.h"

namespace kvstrata {

// The embedded default configuration document.
absl::string_view DefaultConfigToml();

// Default, then the file at `path` (if non-empty), then each "section.key=value" override.
// INVALID_ARGUMENT lists every mistake found (one per line after a count when there are
// several), each naming the key, the value and what is expected; a TOML syntax error is
// reported alone, with its file position. NOT_FOUND when the file does not exist.
absl::StatusOr<Config> LoadConfig(const std::string& path,
                                  const std::vector<std::string>& overrides);

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_CONFIG_CONFIG_LOADER_H_
