#include "daemon/common/spin_wait.h"

#include <sched.h>
#include <sys/socket.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <thread>

namespace kvstrata {
namespace {

int64_t MonotonicNanos() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// Half the CPUs this process may run on (its affinity mask), at least one.
int MaxSpinners() {
  static const int max = [] {
    cpu_set_t set;
    CPU_ZERO(&set);
    int cpus = sched_getaffinity(0, sizeof(set), &set) == 0
                   ? CPU_COUNT(&set)
                   : static_cast<int>(std::thread::hardware_concurrency());
    return std::max(1, cpus / 2);
  }();
  return max;
}

bool Poll(int fd, int64_t deadline) {
  char byte;
  do {
    ssize_t n = recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return true;
    sched_yield();
  } while (MonotonicNanos() < deadline);
  return false;
}

}  // namespace

bool SpinUntilReadable(int fd, absl::Duration budget, int contenders) {
  if (budget <= absl::ZeroDuration() || contenders > MaxSpinners()) return false;
  return Poll(fd, MonotonicNanos() + absl::ToInt64Nanoseconds(budget));
}

}  // namespace kvstrata
