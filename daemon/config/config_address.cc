#include "daemon/config/config_address.h"

#include <cstdint>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace kvstrata {
namespace {

std::string Expected(absl::string_view address, absl::string_view why, PortRule rule) {
  const char* port = rule == PortRule::kFixed       ? "a port from 1 to 65535"
                     : rule == PortRule::kZeroIsAny ? "a port from 0 (any free port) to 65535"
                                                    : "a port from 1 to 65535 or *";
  return absl::StrCat("'", address, "' ", why, ": expected host:port with ", port,
                      " (e.g. 127.0.0.1:9464, [::1]:9464)");
}

}  // namespace

std::optional<std::string> CheckHostPort(absl::string_view address, PortRule rule) {
  size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos) return Expected(address, "has no port", rule);
  absl::string_view host = address.substr(0, colon);
  absl::string_view port = address.substr(colon + 1);
  if (host.empty()) return Expected(address, "has no host", rule);
  for (char c : address) {
    if (absl::ascii_isspace(static_cast<unsigned char>(c))) {
      return Expected(address, "contains a space", rule);
    }
  }
  if (host.front() == '[' || host.back() == ']') {
    if (host.size() < 3 || host.front() != '[' || host.back() != ']') {
      return Expected(address, "has an unbalanced [ ] around the host", rule);
    }
  } else if (host.find(':') != absl::string_view::npos) {
    return Expected(address, "has an IPv6 host without brackets", rule);
  }
  if (rule == PortRule::kZmq && port == "*") return std::nullopt;
  uint32_t number = 0;
  bool digits = !port.empty() && port.size() <= 5 &&
                port.find_first_not_of("0123456789") == absl::string_view::npos &&
                absl::SimpleAtoi(port, &number);
  if (!digits) return Expected(address, absl::StrCat("has port '", port, "', not a number"), rule);
  uint32_t lowest = rule == PortRule::kZeroIsAny ? 0 : 1;
  if (number < lowest || number > 65535) {
    return Expected(address, absl::StrCat("has port ", number, ", out of range"), rule);
  }
  return std::nullopt;
}

std::optional<std::string> CheckZmqEndpoint(absl::string_view endpoint) {
  if (absl::StartsWith(endpoint, "tcp://")) {
    return CheckHostPort(endpoint.substr(6), PortRule::kZmq);
  }
  bool named = (absl::StartsWith(endpoint, "ipc://") && endpoint.size() > 6) ||
               (absl::StartsWith(endpoint, "inproc://") && endpoint.size() > 9);
  if (named) return std::nullopt;
  return absl::StrCat("'", endpoint,
                      "' is not a ZMQ endpoint: expected tcp://host:port (e.g. tcp://*:5557), "
                      "ipc://path or inproc://name");
}

}  // namespace kvstrata
