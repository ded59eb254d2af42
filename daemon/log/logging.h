// Structured logging for the daemon, on spdlog. Messages are "event key=value ..." in
// text format, or one JSON object per line ({"ts","level","msg"}) in json format.
// Thread-safe after InitLogging (spdlog's default logger is synchronized).
#ifndef KVSTRATA_DAEMON_LOG_LOGGING_H_
#define KVSTRATA_DAEMON_LOG_LOGGING_H_

#include <string>

#include "absl/status/status.h"

namespace kvstrata {

// level: trace, debug, info, warn, error; format: text or json. Logs go to stderr
// (journald and kubectl logs pick them up). INVALID_ARGUMENT on an unknown value.
absl::Status InitLogging(const std::string& level, const std::string& format);

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_LOG_LOGGING_H_
