// JSON of a protobuf message for `kvstrata --json`: the proto3 JSON mapping (proto field
// names, enum names, bytes in base64, every scalar and repeated field printed) except that
// 64-bit integers are JSON numbers, not strings: counters and sizes read as numbers in jq
// and scripts. Pure function; thread-compatible.
#ifndef KVSTRATA_CLIENT_CLI_JSON_WRITER_H_
#define KVSTRATA_CLIENT_CLI_JSON_WRITER_H_

#include <google/protobuf/message.h>

#include <string>

namespace kvstrata {

// Indented with two spaces, no trailing newline.
std::string MessageToJson(const google::protobuf::Message& message);

}  // namespace kvstrata

#endif  // KVSTRATA_CLIENT_CLI_JSON_WRITER_H_
