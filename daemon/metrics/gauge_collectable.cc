#include "daemon/metrics/gauge_collectable.h"

#include <dirent.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <sstream>

#include "absl/time/clock.h"

namespace kvstrata {
namespace {

// Fields of /proc/self/stat after the command name: index 11 = utime (field 14 overall).
std::vector<std::string> ProcStatFields() {
  std::ifstream in("/proc/self/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t close = text.rfind(')');
  std::istringstream rest(close == std::string::npos ? "" : text.substr(close + 2));
  std::vector<std::string> fields;
  for (std::string f; rest >> f;) fields.push_back(f);
  return fields;
}

double StatField(size_t index) {
  std::vector<std::string> fields = ProcStatFields();
  return index < fields.size() ? std::stod(fields[index]) : 0;
}

double OpenFds() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return 0;
  double count = 0;
  while (readdir(dir) != nullptr) ++count;
  closedir(dir);
  return count - 3;  // ".", ".." and the directory's own fd.
}

}  // namespace

void GaugeCollectable::Add(std::string name, std::string help, std::function<double()> read) {
  MutexLock lock(&mu_);
  sources_.push_back({std::move(name), std::move(help), std::move(read)});
}

std::vector<prometheus::MetricFamily> GaugeCollectable::Collect() const {
  MutexLock lock(&mu_);
  std::vector<prometheus::MetricFamily> families;
  for (const Source& source : sources_) {
    prometheus::ClientMetric metric;
    metric.gauge.value = source.read();
    families.push_back({source.name, source.help, prometheus::MetricType::Gauge, {metric}});
  }
  return families;
}

void AddProcessGauges(GaugeCollectable& gauges) {
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  const double start = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  gauges.Add("process_cpu_seconds_total", "User and system CPU time spent in seconds.",
             [ticks] { return (StatField(11) + StatField(12)) / ticks; });
  gauges.Add("process_resident_memory_bytes", "Resident memory size in bytes.",
             [page] { return StatField(21) * page; });
  gauges.Add("process_virtual_memory_bytes", "Virtual memory size in bytes.",
             [] { return StatField(20); });
  gauges.Add("process_open_fds", "Number of open file descriptors.", OpenFds);
  gauges.Add("process_start_time_seconds", "Start time of the process since the Unix epoch.",
             [start] { return start; });
}

}  // namespace kvstrata
