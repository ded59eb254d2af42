// Namespaces known to this daemon. Registering a spec twice (from any session) yields the
// same id and fingerprint; ids are dense, start at 1 and live as long as the daemon.
// A namespace outlives the sessions that registered it (its blocks stay cached).
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
#include "daemon/namespaces/namespace_spec.h"

namespace kvstrata {

struct NamespaceInfo {
  uint32_t id = 0;
  std::string fingerprint;
  NamespaceSpec spec;
  uint64_t bytes_per_block = 0;
  uint32_t sessions = 0;  // Live sessions that registered it.
};

class NamespaceRegistry {
 public:
  explicit NamespaceRegistry(uint32_t max_namespaces = 65536) : max_(max_namespaces) {}

  // INVALID_ARGUMENT for a bad spec, RESOURCE_EXHAUSTED past max_namespaces.
  absl::StatusOr<NamespaceInfo> Register(uint64_t session_id, NamespaceSpec spec);

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
  };
  NamespaceInfo Snapshot(const Entry& entry) const;

  const uint32_t max_;
  mutable Mutex mu_;
  std::vector<Entry> entries_ ABSL_GUARDED_BY(mu_);  // entries_[id - 1]
  absl::flat_hash_map<std::string, uint32_t> by_fingerprint_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_NAMESPACES_NAMESPACE_REGISTRY_H_
