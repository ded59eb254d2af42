// --help for the project's programs: `usage` first, then the flags defined in the
// program's own main.cc (Abseil's default lists only flags of a file named after the
// binary, and printed "No flags matched." for kvstratad and kvstrata). Call before
// absl::ParseCommandLine. Not thread-safe (process start-up).
#ifndef KVSTRATA_DAEMON_COMMON_PROGRAM_USAGE_H_
#define KVSTRATA_DAEMON_COMMON_PROGRAM_USAGE_H_

#include <string>

#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "daemon/common/version.h"

namespace kvstrata {

inline void SetProgramUsage(absl::string_view usage) {
  absl::SetProgramUsageMessage(usage);
  absl::FlagsUsageConfig config;
  config.contains_help_flags = [](absl::string_view path) {
    return absl::EndsWith(path, "/main.cc");
  };
  config.contains_helpshort_flags = config.contains_help_flags;
  config.version_string = [] { return std::string(kVersion) + "\n"; };
  absl::SetFlagsUsageConfig(config);
}

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_COMMON_PROGRAM_USAGE_H_
