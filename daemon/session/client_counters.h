// Counters the clients report in their heartbeats (HeartbeatRequest.counters: e.g. the
// vLLM connector's load planner decisions), summed into node totals for Admin.GetStats and
// the metrics page. A report carries a session's cumulative values; it replaces the
// session's last report counter by counter: the totals grow by what each counter grew
// since, a counter left out keeps its value, and a counter lower than its last value is
// ignored (it keeps the larger one; its other counters are taken). When a session ends
// its counters stay in the totals, so a total never decreases while the daemon runs.
// Thread-safe.
#ifndef KVSTRATA_DAEMON_SESSION_CLIENT_COUNTERS_H_
#define KVSTRATA_DAEMON_SESSION_CLIENT_COUNTERS_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "daemon/common/mutex.h"
#include "daemon/session/session_registry.h"

namespace kvstrata {

// Counter name -> value, sorted by name.
using ClientCounterValues = absl::btree_map<std::string, uint64_t>;

inline constexpr size_t kMaxClientCountersPerReport = 32;
inline constexpr size_t kMaxClientCounterNameBytes = 64;
inline constexpr size_t kMaxClientCounterNames = 256;  // distinct names one daemon keeps

// OK, or INVALID_ARGUMENT (naming the entry) unless the report has at most
// kMaxClientCountersPerReport entries, each named by 1..kMaxClientCounterNameBytes bytes
// of [a-z0-9_].
absl::Status ValidateClientCounters(const ClientCounterValues& report);

class ClientCounters : public SessionEndListener {
 public:
  // Records the report of a live session. RESOURCE_EXHAUSTED, and nothing recorded, when it
  // would bring the distinct names past kMaxClientCounterNames.
  // REQUIRES: ValidateClientCounters(report) is OK; the session is live and its end is told
  // (OnSessionEnded) after this returns: SessionRegistry::Heartbeat's `while_live` runs it.
  absl::Status Report(uint64_t session_id, const ClientCounterValues& report);

  // Forgets the session's last report; its counts stay in the totals.
  void OnSessionEnded(uint64_t session_id) override;

  // Node totals by name (saturating at 2^64 - 1): ended sessions' and live ones'.
  ClientCounterValues Totals() const;

 private:
  mutable Mutex mu_;
  ClientCounterValues totals_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, ClientCounterValues> last_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_SESSION_CLIENT_COUNTERS_H_
