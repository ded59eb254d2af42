// MetricsSink backed by prometheus-cpp, served over HTTP at /metrics. Also exports the
// standard process_* metrics (CPU, memory, fds, start time) read from /proc at scrape.
// Thread-safe.
#ifndef KVSTRATA_DAEMON_METRICS_PROMETHEUS_METRICS_H_
#define KVSTRATA_DAEMON_METRICS_PROMETHEUS_METRICS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "daemon/metrics/metrics_sink.h"

namespace kvstrata {

class PrometheusMetrics : public MetricsSink {
 public:
  // Listens on `address` ("host:port"; port 0 picks a free port); "" serves no HTTP.
  // UNAVAILABLE when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<PrometheusMetrics>> Create(const std::string& address);
  ~PrometheusMetrics() override;

  void RecordRpc(absl::string_view method, absl::string_view code, absl::Duration latency) override;
  void AddGauge(std::string name, std::string help, std::function<double()> read) override;

  // "host:port" actually bound, "" when not serving.
  std::string bound_address() const;
  // The text exposition format, as served at /metrics.
  std::string Render() const;

 private:
  struct Impl;
  explicit PrometheusMetrics(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_METRICS_PROMETHEUS_METRICS_H_
