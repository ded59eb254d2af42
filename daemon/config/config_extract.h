// Turns the merged TOML document into a validated Config. Private to the config module.
#ifndef KVSTRATA_DAEMON_CONFIG_CONFIG_EXTRACT_H_
#define KVSTRATA_DAEMON_CONFIG_CONFIG_EXTRACT_H_

#include <toml++/toml.h>

#include <string>
#include <string_view>
#include <vector>

#include "daemon/config/config.h"

namespace kvstrata {

// The Config of `merged`. Each value out of range or malformed adds one line to `errors`
// naming the key, the value and what is expected; the Config is meaningful only when
// `errors` stays empty.
Config ExtractConfig(const toml::table& merged, std::vector<std::string>& errors);

// Whether the key ("section.key") holds a byte size (a string with a unit, or a bare
// number of bytes).
bool IsByteSizeKey(std::string_view dotted);

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_CONFIG_CONFIG_EXTRACT_H_
