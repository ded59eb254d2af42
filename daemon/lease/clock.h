// Clock: the time source of leases and reservations, injectable so tests control expiry.
// Thread safety: implementations must be thread-safe.
#ifndef KVSTRATA_DAEMON_LEASE_CLOCK_H_
#define KVSTRATA_DAEMON_LEASE_CLOCK_H_

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

#endif  // KVSTRATA_DAEMON_LEASE_CLOCK_H_
