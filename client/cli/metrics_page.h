// Reads a kvstratad's Prometheus page for `kvstrata top`: a minimal HTTP/1.0 GET and a
// parser of the text exposition format into samples that can be summed by label.
#ifndef KVSTRATA_CLIENT_CLI_METRICS_PAGE_H_
#define KVSTRATA_CLIENT_CLI_METRICS_PAGE_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace kvstrata {

class MetricsPage {
 public:
  // GET http://<address>/metrics. `address` is "host:port" (IPv4 or a name).
  // UNAVAILABLE when it cannot be fetched.
  static absl::StatusOr<MetricsPage> Fetch(const std::string& address, absl::Duration timeout);
  static MetricsPage Parse(const std::string& text);

  // Sum of the samples named `name` whose labels include every `match` pair.
  double Sum(const std::string& name, const std::map<std::string, std::string>& match = {}) const;

 private:
  struct Sample {
    std::string name;
    std::map<std::string, std::string> labels;
    double value = 0;
  };
  std::vector<Sample> samples_;
};

}  // namespace kvstrata

#endif  // KVSTRATA_CLIENT_CLI_METRICS_PAGE_H_
