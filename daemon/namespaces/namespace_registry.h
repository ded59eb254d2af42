// Namespaces known to this daemon. Registering a spec twice (from any session) yields the
// same id and fingerprint; ids are dense, start at 1 and live as long as the daemon.
// A namespace outlives the sessions that registered it (its blocks stay cached).
// It is also the daemon's one id space for the tiers (NamespaceIds): a fingerprint a tier
// finds before any engine registered it gets its id here (IdOf) and keeps it when it is
// registered later; such a namespace is not listed or found until then.
// Thread-safe.
#ifndef KVSTRATA_DAEMON_NAMESPACES_NAMESPACE_REGISTRY_H_
#define KVSTRATA_DAEMON_NAMESPACES_NAMESPACE_REGISTRY_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "daemon/common/mutex.h"
#include "daemon/namespaces/namespace_ids.h"
#include "daemon/namespaces/namespace_spec.h"

namespace kvstrata {

struct NamespaceInfo {
  uint32_t id = 0;
  std::string fingerprint;
  NamespaceSpec spec;
  uint64_t bytes_per_block = 0;
  uint32_t sessions = 0;  // Live sessions that registered it.
};

class NamespaceRegistry : public NamespaceIds {
 public:
  explicit NamespaceRegistry(uint32_t max_namespaces = 65536) : max_(max_namespaces) {}

  // INVALID_ARGUMENT for a bad spec, RESOURCE_EXHAUSTED past max_namespaces.
  absl::StatusOr<NamespaceInfo> Register(uint64_t session_id, NamespaceSpec spec);

  // NamespaceIds: the id of `fingerprint`, registered or not (0 past max_namespaces).
  NamespaceId IdOf(absl::string_view fingerprint) override;

  // Registered namespaces only (not those IdOf alone gave an id).
  std::optional<NamespaceInfo> Find(uint32_t id) const;
  std::optional<NamespaceInfo> FindByFingerprint(const std::string& fingerprint) const;
  // True when `session_id` registered namespace `id`.
  bool IsRegisteredBy(uint32_t id, uint64_t session_id) const;
  // How many namespaces `session_id` registered.
  size_t CountRegisteredBy(uint64_t session_id) const;
  std::vector<NamespaceInfo> List() const;
  size_t size() const;

  // Forgets the session's registrations (namespaces themselves stay).
  void ReleaseSession(uint64_t session_id);

 private:
  struct Entry {
    NamespaceInfo info;
    absl::flat_hash_set<uint64_t> sessions;
    bool registered = false;  // false: an id IdOf gave out, no spec yet
  };
  const Entry* RegisteredLocked(uint32_t id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  NamespaceInfo Snapshot(const Entry& entry) const;

  const uint32_t max_;
  mutable Mutex mu_;
  std::vector<Entry> entries_ ABSL_GUARDED_BY(mu_);  // entries_[id - 1]
  size_t registered_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<std::string, uint32_t> by_fingerprint_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_NAMESPACES_NAMESPACE_REGISTRY_H_
