// Bounded spin-wait for a socket to become readable, before a blocking read.
//
// A request/answer round trip on a Unix socket between two threads on different CPUs costs
// two cross-CPU wake-ups (on a VM, each an inter-processor interrupt and a halt exit, tens
// of microseconds). SpinUntilReadable polls `fd` (recv with MSG_PEEK | MSG_DONTWAIT) for at
// most `budget`, yielding the CPU between polls, so a peer that answers within the budget
// is seen without being woken. Spinning only pays while CPUs are idle, so the caller says
// how many threads of its kind may want to (`contenders`: the daemon's open lookup
// connections, a process's lookup calls in flight); with more than half the CPUs' worth
// (at least one) it blocks at once.
// Returns true when the socket has data, end of file or an error (a read will not block),
// false when the budget ran out or no spin was allowed (block as usual).
//
// Thread safety: thread-safe (no state).
#ifndef KVSTRATA_DAEMON_COMMON_SPIN_WAIT_H_
#define KVSTRATA_DAEMON_COMMON_SPIN_WAIT_H_

#include "absl/time/time.h"

namespace kvstrata {

bool SpinUntilReadable(int fd, absl::Duration budget, int contenders);

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_COMMON_SPIN_WAIT_H_
