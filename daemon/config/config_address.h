// Checks of the address settings (server.tcp_address, server.metrics_address,
// events.endpoint, events.replay_endpoint). Pure functions; thread-compatible.
#ifndef KVSTRATA_DAEMON_CONFIG_CONFIG_ADDRESS_H_
#define KVSTRATA_DAEMON_CONFIG_CONFIG_ADDRESS_H_

#include <optional>
#include <string>
#include "absl/strings/string_view.h"

namespace kvstrata {

enum class PortRule {
  kFixed,      // 1..65535
  kZeroIsAny,  // 0..65535; 0 = any free port
  kZmq,        // 1..65535 or "*" (any free port, ZMQ's wildcard)
};

// "host:port" (an IPv6 host in brackets: "[::1]:9464"). nullopt when well-formed, else what
// is wrong and what is expected, in words (without the key, which the caller adds).
std::optional<std::string> CheckHostPort(absl::string_view address, PortRule rule);

// A ZMQ endpoint: "tcp://host:port" (port as kZmq), "ipc://path" or "inproc://name".
std::optional<std::string> CheckZmqEndpoint(absl::string_view endpoint);

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_CONFIG_CONFIG_ADDRESS_H_
