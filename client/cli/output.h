// Shared printing for CLI commands: JSON of a response, one-line errors with exit codes,
// and human formatting of sizes, durations and enums.
#ifndef KVSTRATA_CLIENT_CLI_OUTPUT_H_
#define KVSTRATA_CLIENT_CLI_OUTPUT_H_

#include <google/protobuf/message.h>

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "kvstrata/v1/common.pb.h"

namespace kvstrata {

// Prints the message as JSON and a newline (json_writer.h: proto field names, defaults
// included, 64-bit integers as numbers). Returns kExitOk.
int PrintJson(const google::protobuf::Message& message);

// One line on stderr; returns kExitUnavailable or kExitError.
int PrintError(const absl::Status& status);

std::string HumanBytes(uint64_t bytes);      // "4.0GiB"
std::string HumanDuration(uint64_t millis);  // "3h12m5s"
std::string EnumName(const google::protobuf::Message& holder,
                     const char* field);  // short enum name
// The label of a wire tier number among `labels` (Admin.ListTiers: wire number -> label);
// "-" for TIER_UNSPECIFIED (absent), "tier<id>" for a number `labels` lacks.
std::string TierName(v1::Tier tier, const std::map<int, std::string>& labels);

}  // namespace kvstrata

#endif  // KVSTRATA_CLIENT_CLI_OUTPUT_H_
