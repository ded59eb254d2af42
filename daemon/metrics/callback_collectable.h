// A prometheus Collectable whose series are read from callbacks at scrape time: gauges
// and counters, with labels; series of one name form one family. Thread-safe.
#ifndef KVSTRATA_DAEMON_METRICS_CALLBACK_COLLECTABLE_H_
#define KVSTRATA_DAEMON_METRICS_CALLBACK_COLLECTABLE_H_

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "daemon/common/mutex.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace kvstrata {

using MetricLabels = std::vector<std::pair<std::string, std::string>>;

class CallbackCollectable : public prometheus::Collectable {
 public:
  // The first Add of a name fixes its help and type; later ones add series.
  void Add(const std::string& name, const std::string& help, prometheus::MetricType type,
           MetricLabels labels, std::function<double()> read);
  // Series read together: `read` answers (value of `label`, value) pairs at each scrape.
  void AddFamily(const std::string& name, const std::string& help, prometheus::MetricType type,
                 std::string label,
                 std::function<std::vector<std::pair<std::string, double>>()> read);
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  struct Series {
    MetricLabels labels;
    std::function<double()> read;
  };
  struct SeriesSet {
    std::string label;
    std::function<std::vector<std::pair<std::string, double>>()> read;
  };
  struct Family {
    std::string help;
    prometheus::MetricType type = prometheus::MetricType::Gauge;
    std::vector<Series> series;
    std::vector<SeriesSet> sets;
  };
  Family& FamilyOf(const std::string& name, const std::string& help, prometheus::MetricType type)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  mutable Mutex mu_;
  std::map<std::string, Family> families_ ABSL_GUARDED_BY(mu_);
};

// Registers process_cpu_seconds_total, process_resident_memory_bytes,
// process_virtual_memory_bytes, process_open_fds and process_start_time_seconds.
void AddProcessGauges(CallbackCollectable& collectable);

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_METRICS_CALLBACK_COLLECTABLE_H_
