#include "daemon/metrics/callback_collectable.h"

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

CallbackCollectable::Family& CallbackCollectable::FamilyOf(const std::string& name,
                                                           const std::string& help,
                                                           prometheus::MetricType type) {
  auto [it, inserted] = families_.try_emplace(name);
  if (inserted) {
    it->second.help = help;
    it->second.type = type;
  }
  return it->second;
}

void CallbackCollectable::Add(const std::string& name, const std::string& help,
                              prometheus::MetricType type, MetricLabels labels,
                              std::function<double()> read) {
  MutexLock lock(&mu_);
  FamilyOf(name, help, type).series.push_back({std::move(labels), std::move(read)});
}

void CallbackCollectable::AddFamily(
    const std::string& name, const std::string& help, prometheus::MetricType type,
    std::string label, std::function<std::vector<std::pair<std::string, double>>()> read) {
  MutexLock lock(&mu_);
  FamilyOf(name, help, type).sets.push_back({std::move(label), std::move(read)});
}

namespace {

prometheus::ClientMetric Metric(const MetricLabels& labels, prometheus::MetricType type,
                                double value) {
  prometheus::ClientMetric metric;
  for (const auto& [key, label_value] : labels) metric.label.push_back({key, label_value});
  if (type == prometheus::MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  return metric;
}

}  // namespace

std::vector<prometheus::MetricFamily> CallbackCollectable::Collect() const {
  MutexLock lock(&mu_);
  std::vector<prometheus::MetricFamily> families;
  for (const auto& [name, family] : families_) {
    prometheus::MetricFamily out{name, family.help, family.type, {}};
    for (const Series& series : family.series) {
      out.metric.push_back(Metric(series.labels, family.type, series.read()));
    }
    for (const SeriesSet& set : family.sets) {
      for (const auto& [label_value, value] : set.read()) {
        out.metric.push_back(Metric({{set.label, label_value}}, family.type, value));
      }
    }
    families.push_back(std::move(out));
  }
  return families;
}

void AddProcessGauges(CallbackCollectable& collectable) {
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  const double start = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  collectable.Add("process_cpu_seconds_total", "User and system CPU time spent in seconds.",
                  prometheus::MetricType::Counter, {},
                  [ticks] { return (StatField(11) + StatField(12)) / ticks; });
  collectable.Add("process_resident_memory_bytes", "Resident memory size in bytes.",
                  prometheus::MetricType::Gauge, {}, [page] { return StatField(21) * page; });
  collectable.Add("process_virtual_memory_bytes", "Virtual memory size in bytes.",
                  prometheus::MetricType::Gauge, {}, [] { return StatField(20); });
  collectable.Add("process_open_fds", "Number of open file descriptors.",
                  prometheus::MetricType::Gauge, {}, OpenFds);
  collectable.Add("process_start_time_seconds", "Start time of the process since the Unix epoch.",
                  prometheus::MetricType::Gauge, {}, [start] { return start; });
}

}  // namespace kvstrata
