// Who is calling: the tenant a connection belongs to, fixed when it is admitted (peer
// credentials on the Unix sockets, the bearer token on TCP) and never taken from a request.
// Value type.
#ifndef KVSTRATA_DAEMON_SESSION_CALLER_H_
#define KVSTRATA_DAEMON_SESSION_CALLER_H_

#include <cstdint>
#include <optional>
#include <string>

#include "daemon/common/ids.h"

namespace kvstrata {

// Tenant 0 is the default tenant: every caller when no [[tenants]] are configured.
inline constexpr TenantId kDefaultTenant = 0;

struct Caller {
  TenantId tenant = kDefaultTenant;
  bool admin = true;  // may run admin operations and see every tenant's sessions
  // The tenant's name, mixed into the namespaces it registers; "" for the default tenant
  // of a single-tenant daemon (fingerprints stay as they were before tenants existed).
  std::string namespace_scope;
  // May map L1 partition 0 (host mode), where the blocks of every tenant without an L1
  // partition of its own live: a tenant trusted with their bytes.
  bool shared_memory = true;
  // Its own L1 partition (TenantConfig::l1_capacity), which holds its blocks and which its
  // host-mode clients map; 0 = none (its blocks live in partition 0).
  uint32_t partition = 0;
};

// The L1 partition this caller's host-mode clients may map, or nullopt (no host mode).
inline std::optional<uint32_t> MappedPartition(const Caller& caller) {
  if (caller.partition != 0) return caller.partition;
  if (caller.shared_memory) return 0;
  return std::nullopt;
}

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_SESSION_CALLER_H_
