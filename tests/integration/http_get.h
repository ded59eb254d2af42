// A minimal HTTP/1.0 GET over TCP for tests (the metrics endpoint).
#ifndef KVSTRATA_TESTS_INTEGRATION_HTTP_GET_H_
#define KVSTRATA_TESTS_INTEGRATION_HTTP_GET_H_

#include <string>

#include "absl/status/statusor.h"

namespace kvstrata::testing {

// `address` is "host:port" with a numeric IPv4 host. Returns the whole response.
absl::StatusOr<std::string> HttpGet(const std::string& address, const std::string& path);

}  // namespace kvstrata::testing

#endif  // KVSTRATA_TESTS_INTEGRATION_HTTP_GET_H_
