// RecordingMetricsSink: a MetricsSink (daemon/metrics/metrics_sink.h) that keeps the copies
// it is told of (RecordTransfer: tier, direction, bytes, latency), in order, for tests of
// who records what (BlockTier's front, the tiering code). Everything else is dropped, as
// NullMetricsSink does. Thread-safe (one mutex). Header-only.
#ifndef KVSTRATA_DAEMON_TESTING_RECORDING_METRICS_SINK_H_
#define KVSTRATA_DAEMON_TESTING_RECORDING_METRICS_SINK_H_

#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "daemon/common/mutex.h"
#include "daemon/metrics/metrics_sink.h"

namespace kvstrata {

class RecordingMetricsSink final : public NullMetricsSink {
 public:
  struct Copy {
    Tier tier;
    CopyDirection direction;
    uint64_t bytes;
    absl::Duration took;
  };

  void RecordTransfer(Tier lower, CopyDirection direction, uint64_t bytes,
                      absl::Duration took) override {
    MutexLock lock(&mu_);
    copies_.push_back(Copy{lower, direction, bytes, took});
  }

  std::vector<Copy> copies() const {
    MutexLock lock(&mu_);
    return copies_;
  }
  // The copies recorded between `tier` and the level above it in `direction`, and their
  // bytes.
  size_t Count(Tier tier, CopyDirection direction) const {
    size_t n = 0;
    for (const Copy& c : copies()) n += c.tier == tier && c.direction == direction ? 1 : 0;
    return n;
  }
  uint64_t Bytes(Tier tier, CopyDirection direction) const {
    uint64_t n = 0;
    for (const Copy& c : copies()) n += c.tier == tier && c.direction == direction ? c.bytes : 0;
    return n;
  }

 private:
  mutable Mutex mu_;
  std::vector<Copy> copies_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_TESTING_RECORDING_METRICS_SINK_H_
