// Clock: the daemon's time source for ages, expiries and cooldowns (leases, reservations,
// the file tiers' index and fault states), injectable so tests control them. Latencies and
// bounded waits use a monotonic clock instead (std::chrono::steady_clock).
// Thread safety: implementations must be thread-safe.
#ifndef KVSTRATA_DAEMON_COMMON_CLOCK_H_
#define KVSTRATA_DAEMON_COMMON_CLOCK_H_

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace kvstrata {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
};

class SystemClock final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
  // A process-wide instance (never destroyed).
  static Clock* Get() {
    static SystemClock* clock = new SystemClock;
    return clock;
  }
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_COMMON_CLOCK_H_
