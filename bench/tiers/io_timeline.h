// IoTimeline: the (start, end) times of a run's I/Os, one per block file, and what the
// L2/fio comparison (l2_fio.cc) reads off them: aggregate GB/s, the per-I/O latency
// percentiles, and the time the run took for each `window` consecutive completions (one
// prompt's blocks: how long `window` blocks take at the run's queue depth). fio's
// per-I/O logs (fio_runner.h) and the tier's own per-call times go through the same code.
// Plain value type; not thread-safe (fill it from one thread, or merge per-thread ones).
#ifndef KVSTRATA_BENCH_TIERS_IO_TIMELINE_H_
#define KVSTRATA_BENCH_TIERS_IO_TIMELINE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvstrata::bench {

// p50 / p99 of a sample, in the sample's unit; 0 when empty.
struct Percentiles {
  double p50 = 0, p99 = 0;
  size_t count = 0;
};
Percentiles PercentilesOf(std::vector<double> values);

class IoTimeline {
 public:
  // One I/O of `bytes` from `start` to `end` (seconds, any common origin).
  void Add(double start, double end, uint64_t bytes) { ios_.push_back({start, end, bytes}); }
  void Merge(const IoTimeline& other) {
    ios_.insert(ios_.end(), other.ios_.begin(), other.ios_.end());
  }
  size_t size() const { return ios_.size(); }

  // Bytes over the time from the first start to the last end, in GB/s.
  double Gbps() const;
  // Latency of one I/O, in milliseconds.
  Percentiles Latency() const;
  // In completion order, each run of `window` consecutive completions (not overlapping):
  // from the earliest start among them to the last end, in milliseconds.
  Percentiles WindowTime(size_t window) const;

 private:
  struct Io {
    double start, end;
    uint64_t bytes;
  };
  std::vector<Io> ios_;
};

}  // namespace kvstrata::bench

#endif  // KVSTRATA_BENCH_TIERS_IO_TIMELINE_H_
