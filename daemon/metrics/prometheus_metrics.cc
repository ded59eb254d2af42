#include "daemon/metrics/prometheus_metrics.h"

#include <algorithm>
#include <array>
#include <atomic>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "daemon/common/mutex.h"
#include "daemon/metrics/callback_collectable.h"
#include "daemon/metrics/metrics_http_server.h"
#include "prometheus/counter.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"

namespace kvstrata {
namespace {

using prometheus::Counter;
using prometheus::Histogram;

const Histogram::BucketBoundaries& RpcBuckets() {
  static const Histogram::BucketBoundaries kBuckets = {1e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3,
                                                       5e-3, 1e-2, 5e-2, 0.1,    0.5,  1,    5};
  return kBuckets;
}

const Histogram::BucketBoundaries& TransferSecondsBuckets() {
  static const Histogram::BucketBoundaries kBuckets = {
      5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1, 2.5, 10};
  return kBuckets;
}

const Histogram::BucketBoundaries& TransferBytesBuckets() {
  static const Histogram::BucketBoundaries kBuckets = [] {
    Histogram::BucketBoundaries b;
    for (double v = 4096; v <= double(1ULL << 32); v *= 4) b.push_back(v);  // 4 KiB .. 4 GiB
    return b;
  }();
  return kBuckets;
}

std::string Str(std::string_view s) { return std::string(s); }

}  // namespace

struct PrometheusMetrics::Impl {
  std::shared_ptr<prometheus::Registry> registry = std::make_shared<prometheus::Registry>();
  std::shared_ptr<CallbackCollectable> callbacks = std::make_shared<CallbackCollectable>();
  prometheus::Family<Counter>* rpc_total = nullptr;
  prometheus::Family<Histogram>* rpc_seconds = nullptr;
  prometheus::Family<Counter>* errors = nullptr;
  Counter* lookups = nullptr;
  Counter* lookup_blocks = nullptr;
  // By tier id; nullptr for an id the tier table does not have (not recorded).
  std::array<Counter*, kMaxTiers> hit_blocks{}, hit_tokens{}, stored{};
  std::array<std::array<Counter*, kRemovalCauseCount>, kMaxTiers> removed{};
  std::array<Counter*, kCopyRouteCount> transfer_bytes{};
  std::array<Histogram*, kCopyRouteCount> transfer_size{}, transfer_seconds{};
  // Dropped stores: series created on first use, read through `callbacks` (the L1 ones
  // are registered by the daemon from the cache's own counters).
  std::string bound_address;
  std::unique_ptr<MetricsHttpServer> server;  // Last: stopped before the rest goes.

  std::string Render() const {
    std::vector<prometheus::MetricFamily> families = registry->Collect();
    std::vector<prometheus::MetricFamily> more = callbacks->Collect();
    families.insert(families.end(), more.begin(), more.end());
    return prometheus::TextSerializer().Serialize(families);
  }

  void Build(const TierTable& tiers) {
    prometheus::Registry& r = *registry;
    rpc_total = &prometheus::BuildCounter()
                     .Name("kvstrata_rpc_requests_total")
                     .Help("gRPC calls served, by method and status code.")
                     .Register(r);
    rpc_seconds = &prometheus::BuildHistogram()
                       .Name("kvstrata_rpc_duration_seconds")
                       .Help("gRPC call latency, by method.")
                       .Register(r);
    errors = &prometheus::BuildCounter()
                  .Name("kvstrata_errors_total")
                  .Help(
                      "Errors by kind: rpc_<status code> for failed RPCs, job_store_failed, "
                      "job_load_failed, and the tiers' I/O errors.")
                  .Register(r);
    lookups = &prometheus::BuildCounter()
                   .Name("kvstrata_lookups_total")
                   .Help("Lookups served (gRPC and the fast path).")
                   .Register(r)
                   .Add({});
    lookup_blocks = &prometheus::BuildCounter()
                         .Name("kvstrata_lookup_blocks_total")
                         .Help("Blocks asked for by lookups.")
                         .Register(r)
                         .Add({});
    auto& hit_b = prometheus::BuildCounter()
                      .Name("kvstrata_hit_blocks_total")
                      .Help("Leading blocks found by lookups, by the tier that held them.")
                      .Register(r);
    auto& hit_t = prometheus::BuildCounter()
                      .Name("kvstrata_hit_tokens_total")
                      .Help("Tokens of the leading blocks found by lookups, by tier.")
                      .Register(r);
    auto& stored_f = prometheus::BuildCounter()
                         .Name("kvstrata_blocks_stored_total")
                         .Help("Blocks that became visible in a tier.")
                         .Register(r);
    auto& removed_f = prometheus::BuildCounter()
                          .Name("kvstrata_blocks_removed_total")
                          .Help(
                              "Blocks that left a tier, by cause (evicted, admin_evict, "
                              "cleared).")
                          .Register(r);
    for (const TierDescriptor& d : tiers.all()) {
      const int t = TierIndex(d.id);
      const std::string& tier = d.label;
      hit_blocks[t] = &hit_b.Add({{"tier", tier}});
      hit_tokens[t] = &hit_t.Add({{"tier", tier}});
      stored[t] = &stored_f.Add({{"tier", tier}});
      for (int k = 0; k < kRemovalCauseCount; ++k) {
        removed[t][k] = &removed_f.Add(
            {{"tier", tier}, {"cause", Str(RemovalCauseName(static_cast<RemovalCause>(k)))}});
      }
    }
    auto& bytes_f = prometheus::BuildCounter()
                        .Name("kvstrata_transfer_bytes_total")
                        .Help(
                            "KV bytes moved, by direction (gpu_to_l1, l1_to_gpu, and "
                            "l1_to_<tier>, <tier>_to_l1 for each lower tier's label).")
                        .Register(r);
    auto& size_f = prometheus::BuildHistogram()
                       .Name("kvstrata_transfer_size_bytes")
                       .Help(
                           "Bytes per transfer (one job's copies, one promotion, ...), by "
                           "direction.")
                       .Register(r);
    auto& seconds_f = prometheus::BuildHistogram()
                          .Name("kvstrata_transfer_duration_seconds")
                          .Help("Latency of one transfer, by direction.")
                          .Register(r);
    for (const TierDescriptor& t : tiers.all()) {
      for (CopyDirection dir : {CopyDirection::kDown, CopyDirection::kUp}) {
        const int d = CopyRouteIndex(t.id, dir);
        prometheus::Labels labels{{"direction", tiers.RouteName(t.id, dir)}};
        transfer_bytes[d] = &bytes_f.Add(labels);
        transfer_size[d] = &size_f.Add(labels, TransferBytesBuckets());
        transfer_seconds[d] = &seconds_f.Add(labels, TransferSecondsBuckets());
      }
    }
  }
};

absl::StatusOr<std::unique_ptr<PrometheusMetrics>> PrometheusMetrics::Create(
    const std::string& address, const TierTable& tiers) {
  auto impl = std::make_unique<Impl>();
  impl->Build(tiers);
  AddProcessGauges(*impl->callbacks);
  if (!address.empty()) {
    const Impl* page = impl.get();
    absl::StatusOr<std::unique_ptr<MetricsHttpServer>> server =
        MetricsHttpServer::Start({.address = address}, [page] { return page->Render(); });
    if (!server.ok()) return server.status();
    impl->server = std::move(*server);
    std::string host = address.substr(0, address.rfind(':'));
    impl->bound_address = absl::StrCat(host, ":", impl->server->port());
    MetricsHttpServer* http = impl->server.get();
    impl->callbacks->Add("kvstrata_metrics_connections",
                         "Open connections to this metrics endpoint (idle ones included).",
                         prometheus::MetricType::Gauge, {},
                         [http] { return static_cast<double>(http->open_connections()); });
    impl->callbacks->Add("kvstrata_metrics_scrapes_total", "Pages served at /metrics.",
                         prometheus::MetricType::Counter, {},
                         [http] { return static_cast<double>(http->pages_served()); });
  }
  return std::unique_ptr<PrometheusMetrics>(new PrometheusMetrics(std::move(impl)));
}

PrometheusMetrics::PrometheusMetrics(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PrometheusMetrics::~PrometheusMetrics() = default;

void PrometheusMetrics::RecordRpc(absl::string_view method, absl::string_view code,
                                  absl::Duration latency) {
  impl_->rpc_total->Add({{"method", std::string(method)}, {"code", std::string(code)}}).Increment();
  impl_->rpc_seconds->Add({{"method", std::string(method)}}, RpcBuckets())
      .Observe(absl::ToDoubleSeconds(latency));
  if (code != "OK") RecordError(absl::StrCat("rpc_", absl::AsciiStrToLower(code)));
}

void PrometheusMetrics::RecordLookup(const LookupSample& sample) {
  impl_->lookups->Increment();
  impl_->lookup_blocks->Increment(static_cast<double>(sample.requested_blocks));
  for (int t = 0; t < kMaxTiers; ++t) {
    if (impl_->hit_blocks[t] == nullptr) continue;
    if (sample.hit_blocks[t] > 0) {
      impl_->hit_blocks[t]->Increment(static_cast<double>(sample.hit_blocks[t]));
    }
    if (sample.hit_tokens[t] > 0) {
      impl_->hit_tokens[t]->Increment(static_cast<double>(sample.hit_tokens[t]));
    }
  }
}

void PrometheusMetrics::RecordTransfer(Tier lower, CopyDirection direction, uint64_t bytes,
                                       absl::Duration latency) {
  int d = CopyRouteIndex(lower, direction);
  if (impl_->transfer_bytes[d] == nullptr) return;
  impl_->transfer_bytes[d]->Increment(static_cast<double>(bytes));
  impl_->transfer_size[d]->Observe(static_cast<double>(bytes));
  impl_->transfer_seconds[d]->Observe(absl::ToDoubleSeconds(latency));
}

void PrometheusMetrics::RecordStored(Tier tier, uint64_t blocks) {
  if (Counter* c = impl_->stored[TierIndex(tier)]; c != nullptr) {
    c->Increment(static_cast<double>(blocks));
  }
}

void PrometheusMetrics::RecordRemoved(Tier tier, RemovalCause cause, uint64_t blocks) {
  if (Counter* c = impl_->removed[TierIndex(tier)][static_cast<int>(cause)]; c != nullptr) {
    c->Increment(static_cast<double>(blocks));
  }
}

void PrometheusMetrics::RecordError(absl::string_view kind) {
  impl_->errors->Add({{"kind", std::string(kind)}}).Increment();
}

void PrometheusMetrics::AddGauge(std::string name, std::string help, MetricLabelPairs labels,
                                 std::function<double()> read) {
  impl_->callbacks->Add(name, help, prometheus::MetricType::Gauge, std::move(labels),
                        std::move(read));
}

void PrometheusMetrics::AddCounter(std::string name, std::string help, MetricLabelPairs labels,
                                   std::function<double()> read) {
  impl_->callbacks->Add(name, help, prometheus::MetricType::Counter, std::move(labels),
                        std::move(read));
}

void PrometheusMetrics::AddCounterFamily(std::string name, std::string help, std::string label,
                                         std::function<LabelledValues()> read) {
  impl_->callbacks->AddFamily(name, help, prometheus::MetricType::Counter, std::move(label),
                              std::move(read));
}

double PrometheusMetrics::CounterTotal(absl::string_view name,
                                       const MetricLabelPairs& match) const {
  std::vector<prometheus::MetricFamily> families = impl_->registry->Collect();
  std::vector<prometheus::MetricFamily> callbacks = impl_->callbacks->Collect();
  families.insert(families.end(), callbacks.begin(), callbacks.end());
  double total = 0;
  for (const prometheus::MetricFamily& family : families) {
    if (family.name != name || family.type != prometheus::MetricType::Counter) continue;
    for (const prometheus::ClientMetric& metric : family.metric) {
      const bool matches = std::all_of(match.begin(), match.end(), [&](const auto& want) {
        return std::any_of(metric.label.begin(), metric.label.end(), [&](const auto& label) {
          return label.name == want.first && label.value == want.second;
        });
      });
      if (matches) total += metric.counter.value;
    }
  }
  return total;
}

std::string PrometheusMetrics::bound_address() const { return impl_->bound_address; }

std::string PrometheusMetrics::Render() const { return impl_->Render(); }

}  // namespace kvstrata
