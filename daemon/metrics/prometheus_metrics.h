// MetricsSink backed by prometheus-cpp, served over HTTP at /metrics (docs/metrics.md).
// Also exports the standard process_* metrics (CPU, memory, fds, start time) read from
// /proc at scrape. Every per-tier, per-direction and per-cause series exists from the
// start (zero), so dashboards and alerts see them before the first event: one per tier of
// the tier table it is created with, labelled with the tier's label. Thread-safe.
#ifndef KVSTRATA_DAEMON_METRICS_PROMETHEUS_METRICS_H_
#define KVSTRATA_DAEMON_METRICS_PROMETHEUS_METRICS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "daemon/common/tier_table.h"
#include "daemon/metrics/metrics_sink.h"

namespace kvstrata {

class PrometheusMetrics : public MetricsSink {
 public:
  // Listens on `address` ("host:port"; port 0 picks a free port); "" serves no HTTP.
  // `tiers`: the daemon's tier table (a tier not in it is not recorded). UNAVAILABLE when
  // the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<PrometheusMetrics>> Create(
      const std::string& address, const TierTable& tiers = TierTable::Standard());
  ~PrometheusMetrics() override;

  void RecordRpc(absl::string_view method, absl::string_view code, absl::Duration latency) override;
  void RecordLookup(const LookupSample& sample) override;
  void RecordTransfer(Tier lower, CopyDirection direction, uint64_t bytes,
                      absl::Duration latency) override;
  void RecordStored(Tier tier, uint64_t blocks) override;
  void RecordRemoved(Tier tier, RemovalCause cause, uint64_t blocks) override;
  void RecordError(absl::string_view kind) override;
  using MetricsSink::AddGauge;
  void AddGauge(std::string name, std::string help, MetricLabelPairs labels,
                std::function<double()> read) override;
  void AddCounter(std::string name, std::string help, MetricLabelPairs labels,
                  std::function<double()> read) override;
  void AddCounterFamily(std::string name, std::string help, std::string label,
                        std::function<LabelledValues()> read) override;

  double CounterTotal(absl::string_view name, const MetricLabelPairs& match) const override;

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
