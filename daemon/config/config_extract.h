// Turns the merged TOML document into a validated Config. Private to the config module.
#ifndef KVSTRATA_DAEMON_CONFIG_CONFIG_EXTRACT_H_
#define KVSTRATA_DAEMON_CONFIG_CONFIG_EXTRACT_H_

#include <toml++/toml.h>

#include "absl/status/statusor.h"
#include "daemon/config/config.h"

namespace kvstrata {

// INVALID_ARGUMENT names the key whose value is out of range or malformed.
absl::StatusOr<Config> ExtractConfig(const toml::table& merged);

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_CONFIG_CONFIG_EXTRACT_H_
