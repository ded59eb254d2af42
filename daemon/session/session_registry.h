// Client sessions. A session owns everything its client creates (namespace registrations,
// KV memory registrations, leases, reservations, jobs); when it ends — closed by the
// client, or expired because heartbeats stopped — every SessionEndListener is told, after
// the session is gone from the registry and outside its lock, so owners free their parts.
// Session ids are random 64-bit numbers, so an id from before a daemon restart is
// unknown (NOT_FOUND) rather than someone else's. A session belongs to the tenant that
// opened it: to every other tenant it is unknown (NOT_FOUND, the same answer as for an id
// that never existed). Thread-safe.
#ifndef KVSTRATA_DAEMON_SESSION_SESSION_REGISTRY_H_
#define KVSTRATA_DAEMON_SESSION_SESSION_REGISTRY_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/random/random.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/common/mutex.h"
#include "daemon/session/caller.h"

namespace kvstrata {

struct SessionLimits {
  absl::Duration default_heartbeat_timeout = absl::Seconds(10);
  absl::Duration max_heartbeat_timeout = absl::Minutes(5);
  size_t max_sessions = 1024;
};

struct SessionInfo {
  uint64_t id = 0;
  TenantId tenant = kDefaultTenant;
  std::string client_name;
  uint32_t pid = 0;
  std::string hostname;
  absl::Duration heartbeat_timeout;
  absl::Time opened;
  absl::Time last_heartbeat;
};

// Told when a session ends; must not call back into the SessionRegistry.
class SessionEndListener {
 public:
  virtual ~SessionEndListener() = default;
  virtual void OnSessionEnded(uint64_t session_id) = 0;
};

class SessionRegistry {
 public:
  using Clock = std::function<absl::Time()>;
  explicit SessionRegistry(
      SessionLimits limits, Clock clock = [] { return absl::Now(); });

  // REQUIRES: called before sessions open; the listener outlives the registry's use.
  void AddListener(SessionEndListener* listener);

  // INVALID_ARGUMENT for bad names, RESOURCE_EXHAUSTED past max_sessions. A requested
  // heartbeat timeout of zero takes the default; others are clamped to [100ms, max].
  absl::StatusOr<SessionInfo> Open(TenantId tenant, std::string client_name, uint32_t pid,
                                   std::string hostname,
                                   absl::Duration requested_heartbeat_timeout);
  // NOT_FOUND when unknown, ended, or another tenant's.
  absl::Status Heartbeat(uint64_t session_id, TenantId tenant);
  // The same, running `while_live` first while the session is live, under the registry's
  // lock: whatever it records happens before the session's end is told to the listeners.
  // An error of `while_live` is answered and the heartbeat is not counted. `while_live`
  // must not call back into the registry.
  absl::Status Heartbeat(uint64_t session_id, TenantId tenant,
                         absl::FunctionRef<absl::Status()> while_live);
  absl::Status Check(uint64_t session_id, TenantId tenant) const;
  absl::Status Close(uint64_t session_id, TenantId tenant);

  // Ends every session whose last heartbeat is older than its timeout; returns their ids.
  std::vector<uint64_t> ExpireStale();
  void CloseAll();

  // Every session (nullopt), or one tenant's.
  std::vector<SessionInfo> List(std::optional<TenantId> tenant = std::nullopt) const;
  size_t size() const;

 private:
  void NotifyEnded(const std::vector<uint64_t>& ids);

  const SessionLimits limits_;
  const Clock clock_;
  std::vector<SessionEndListener*> listeners_;
  mutable Mutex mu_;
  absl::flat_hash_map<uint64_t, SessionInfo> sessions_ ABSL_GUARDED_BY(mu_);
  absl::BitGen random_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_SESSION_SESSION_REGISTRY_H_
