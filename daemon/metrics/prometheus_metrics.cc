#include "daemon/metrics/prometheus_metrics.h"

#include <exception>

#include "absl/strings/str_cat.h"
#include "daemon/metrics/gauge_collectable.h"
#include "prometheus/counter.h"
#include "prometheus/exposer.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"

namespace kvstrata {

struct PrometheusMetrics::Impl {
  std::shared_ptr<prometheus::Registry> registry = std::make_shared<prometheus::Registry>();
  std::shared_ptr<GaugeCollectable> gauges = std::make_shared<GaugeCollectable>();
  prometheus::Family<prometheus::Counter>* rpc_total = nullptr;
  prometheus::Family<prometheus::Histogram>* rpc_seconds = nullptr;
  std::unique_ptr<prometheus::Exposer> exposer;
  std::string bound_address;
};

absl::StatusOr<std::unique_ptr<PrometheusMetrics>> PrometheusMetrics::Create(
    const std::string& address) {
  auto impl = std::make_unique<Impl>();
  impl->rpc_total = &prometheus::BuildCounter()
                         .Name("kvstrata_rpc_requests_total")
                         .Help("gRPC calls served, by method and status code.")
                         .Register(*impl->registry);
  impl->rpc_seconds = &prometheus::BuildHistogram()
                           .Name("kvstrata_rpc_duration_seconds")
                           .Help("gRPC call latency, by method.")
                           .Register(*impl->registry);
  AddProcessGauges(*impl->gauges);
  if (!address.empty()) {
    try {
      impl->exposer = std::make_unique<prometheus::Exposer>(address, 2);
    } catch (const std::exception& e) {
      return absl::UnavailableError(
          absl::StrCat("cannot serve metrics on '", address, "': ", e.what()));
    }
    impl->exposer->RegisterCollectable(impl->registry);
    impl->exposer->RegisterCollectable(impl->gauges);
    std::string host = address.substr(0, address.rfind(':'));
    std::vector<int> ports = impl->exposer->GetListeningPorts();
    impl->bound_address = absl::StrCat(host, ":", ports.empty() ? 0 : ports.front());
  }
  return std::unique_ptr<PrometheusMetrics>(new PrometheusMetrics(std::move(impl)));
}

PrometheusMetrics::PrometheusMetrics(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PrometheusMetrics::~PrometheusMetrics() = default;

void PrometheusMetrics::RecordRpc(absl::string_view method, absl::string_view code,
                                  absl::Duration latency) {
  static const prometheus::Histogram::BucketBoundaries kBuckets = {
      1e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 5e-2, 0.1, 0.5, 1, 5};
  impl_->rpc_total->Add({{"method", std::string(method)}, {"code", std::string(code)}}).Increment();
  impl_->rpc_seconds->Add({{"method", std::string(method)}}, kBuckets)
      .Observe(absl::ToDoubleSeconds(latency));
}

void PrometheusMetrics::AddGauge(std::string name, std::string help, std::function<double()> read) {
  impl_->gauges->Add(std::move(name), std::move(help), std::move(read));
}

std::string PrometheusMetrics::bound_address() const { return impl_->bound_address; }

std::string PrometheusMetrics::Render() const {
  std::vector<prometheus::MetricFamily> families = impl_->registry->Collect();
  std::vector<prometheus::MetricFamily> gauges = impl_->gauges->Collect();
  families.insert(families.end(), gauges.begin(), gauges.end());
  return prometheus::TextSerializer().Serialize(families);
}

}  // namespace kvstrata
