// The one small interface through which components report numbers. Only the metrics
// module knows Prometheus (docs/metrics.md lists every metric). Implementations are
// thread-safe; the Record* calls are cheap (no allocation once a series exists) and may
// be made with locks held.
#ifndef KVSTRATA_DAEMON_METRICS_METRICS_SINK_H_
#define KVSTRATA_DAEMON_METRICS_METRICS_SINK_H_

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "daemon/common/tier.h"

namespace kvstrata {

// One lookup: blocks asked for, and leading hits (blocks and tokens) by the tier that
// served each block (indexed by TierIndex). Tiers and copy routes are labelled with the
// names of the daemon's tier table (daemon/common/tier_table.h), removal causes with
// daemon/common/tier.h's.
struct LookupSample {
  uint64_t requested_blocks = 0;
  std::array<uint64_t, kMaxTiers> hit_blocks{};
  std::array<uint64_t, kMaxTiers> hit_tokens{};
};

using MetricLabelPairs = std::vector<std::pair<std::string, std::string>>;
using LabelledValues = std::vector<std::pair<std::string, double>>;  // label value, value

class MetricsSink {
 public:
  virtual ~MetricsSink() = default;

  // One finished RPC: method name ("Control.OpenSession"), status code name ("OK"). A
  // code other than OK also counts as the error kind "rpc_<code>".
  virtual void RecordRpc(absl::string_view method, absl::string_view code,
                         absl::Duration latency) = 0;

  virtual void RecordLookup(const LookupSample&) {}
  // Bytes moved by one copy between `lower` and the level above it (the GPU above L1):
  // a job's copies (lower = L1), a write-down or a promotion (lower = a tier below L1).
  virtual void RecordTransfer(Tier /*lower*/, CopyDirection, uint64_t /*bytes*/, absl::Duration) {}
  virtual void RecordStored(Tier, uint64_t /*blocks*/) {}
  virtual void RecordRemoved(Tier, RemovalCause, uint64_t /*blocks*/) {}
  // An error that is not an RPC status: "job_store_failed", "l2_io", ... (snake_case).
  virtual void RecordError(absl::string_view /*kind*/) {}

  // A gauge or counter read when metrics are scraped. `name` must start with "kvstrata_";
  // series of one name share its family (same help and type).
  // REQUIRES: `read` stays valid for the sink's lifetime and is thread-safe.
  virtual void AddGauge(std::string name, std::string help, std::function<double()> read) {
    AddGauge(std::move(name), std::move(help), {}, std::move(read));
  }
  virtual void AddGauge(std::string /*name*/, std::string /*help*/, MetricLabelPairs /*labels*/,
                        std::function<double()> /*read*/) {}
  virtual void AddCounter(std::string /*name*/, std::string /*help*/, MetricLabelPairs /*labels*/,
                          std::function<double()> /*read*/) {}
  // A counter family whose series are read at scrape time, one per value of the label
  // `label`: `read` answers (label value, count) pairs, and a series exists from the first
  // scrape that answers its value. Same REQUIRES as AddCounter.
  virtual void AddCounterFamily(std::string /*name*/, std::string /*help*/, std::string /*label*/,
                                std::function<LabelledValues()> /*read*/) {}

  // The sum of the counter series named `name` whose labels include every `match` pair,
  // as a scrape would read them now (Admin.GetStats serves these; `kvstrata top` turns them
  // into rates). 0 for a name with no series.
  virtual double CounterTotal(absl::string_view /*name*/, const MetricLabelPairs& /*match*/) const {
    return 0;
  }
};

// Discards everything (tests, tools).
class NullMetricsSink : public MetricsSink {
 public:
  void RecordRpc(absl::string_view, absl::string_view, absl::Duration) override {}
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_METRICS_METRICS_SINK_H_
