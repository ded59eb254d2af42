// Human byte sizes in config and output: "4GiB", "512MiB", "64KiB", "1TiB", "100MB",
// "4096" (bytes). Binary (KiB, MiB, GiB, TiB) and decimal (KB, MB, GB, TB) units.
#ifndef KVSTRATA_DAEMON_COMMON_BYTE_SIZE_H_
#define KVSTRATA_DAEMON_COMMON_BYTE_SIZE_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace kvstrata {

// INVALID_ARGUMENT (naming the text and every accepted unit) on an unknown unit, a negative or
// fractional count, or overflow.
absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text);

// The largest binary unit that divides exactly, e.g. 4294967296 -> "4GiB", 1000 -> "1000B".
std::string FormatByteSize(uint64_t bytes);

// For people reading logs: one decimal in the largest binary unit reached, e.g.
// 4294967296 -> "4.0 GiB", 1610612736 -> "1.5 GiB", 1000 -> "1000 B".
std::string HumanByteSize(uint64_t bytes);

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_COMMON_BYTE_SIZE_H_
