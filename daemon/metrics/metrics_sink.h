// The one small interface through which components report numbers. Only the metrics
// module knows Prometheus. Implementations are thread-safe.
#ifndef KVSTRATA_DAEMON_METRICS_METRICS_SINK_H_
#define KVSTRATA_DAEMON_METRICS_METRICS_SINK_H_

#include <functional>
#include <string>
#include <string_view>

#include "absl/time/time.h"

namespace kvstrata {

class MetricsSink {
 public:
  virtual ~MetricsSink() = default;

  // One finished RPC: method name ("Control.OpenSession"), status code name ("OK").
  virtual void RecordRpc(absl::string_view method, absl::string_view code,
                         absl::Duration latency) = 0;

  // A gauge read when metrics are scraped. `name` must start with "kvstrata_".
  // REQUIRES: `read` stays valid for the sink's lifetime and is thread-safe.
  virtual void AddGauge(std::string name, std::string help, std::function<double()> read) = 0;
};

// Discards everything (tests, tools).
class NullMetricsSink : public MetricsSink {
 public:
  void RecordRpc(absl::string_view, absl::string_view, absl::Duration) override {}
  void AddGauge(std::string, std::string, std::function<double()>) override {}
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_METRICS_METRICS_SINK_H_
