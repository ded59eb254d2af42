#include "bench/tiers/io_timeline.h"

#include <algorithm>
#include <cmath>

namespace kvstrata::bench {

Percentiles PercentilesOf(std::vector<double> values) {
  Percentiles p;
  p.count = values.size();
  if (values.empty()) return p;
  std::sort(values.begin(), values.end());
  auto at = [&](double q) {
    const size_t i = static_cast<size_t>(std::ceil(q * static_cast<double>(values.size()))) - 1;
    return values[std::min(i, values.size() - 1)];
  };
  p.p50 = at(0.50);
  p.p99 = at(0.99);
  return p;
}

double IoTimeline::Gbps() const {
  if (ios_.empty()) return 0;
  double first = ios_.front().start, last = ios_.front().end;
  uint64_t bytes = 0;
  for (const Io& io : ios_) {
    first = std::min(first, io.start);
    last = std::max(last, io.end);
    bytes += io.bytes;
  }
  return last > first ? static_cast<double>(bytes) / (last - first) / 1e9 : 0;
}

Percentiles IoTimeline::Latency() const {
  std::vector<double> ms;
  ms.reserve(ios_.size());
  for (const Io& io : ios_) ms.push_back((io.end - io.start) * 1e3);
  return PercentilesOf(std::move(ms));
}

Percentiles IoTimeline::WindowTime(size_t window) const {
  std::vector<Io> sorted = ios_;
  std::sort(sorted.begin(), sorted.end(), [](const Io& a, const Io& b) { return a.end < b.end; });
  std::vector<double> ms;
  for (size_t begin = 0; window > 0 && begin + window <= sorted.size(); begin += window) {
    double first = sorted[begin].start;
    for (size_t i = begin; i < begin + window; ++i) first = std::min(first, sorted[i].start);
    ms.push_back((sorted[begin + window - 1].end - first) * 1e3);
  }
  return PercentilesOf(std::move(ms));
}

}  // namespace kvstrata::bench
