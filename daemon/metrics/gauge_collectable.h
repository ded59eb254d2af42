// A prometheus Collectable whose gauges are read from callbacks at scrape time.
// Thread-safe.
#ifndef KVSTRATA_DAEMON_METRICS_GAUGE_COLLECTABLE_H_
#define KVSTRATA_DAEMON_METRICS_GAUGE_COLLECTABLE_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "daemon/common/mutex.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace kvstrata {

class GaugeCollectable : public prometheus::Collectable {
 public:
  void Add(std::string name, std::string help, std::function<double()> read);
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  struct Source {
    std::string name;
    std::string help;
    std::function<double()> read;
  };
  mutable Mutex mu_;
  std::vector<Source> sources_ ABSL_GUARDED_BY(mu_);
};

// Registers process_cpu_seconds_total, process_resident_memory_bytes,
// process_virtual_memory_bytes, process_open_fds and process_start_time_seconds.
void AddProcessGauges(GaugeCollectable& gauges);

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_METRICS_GAUGE_COLLECTABLE_H_
