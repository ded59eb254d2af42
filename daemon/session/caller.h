// Who is calling: the tenant a connection belongs to, fixed when it is admitted (peer
// credentials on the Unix sockets, the bearer token on TCP) and never taken from a request.
// Value type.
#ifndef KVSTRATA_DAEMON_SESSION_CALLER_H_
#define KVSTRATA_DAEMON_SESSION_CALLER_H_

#include <cstdint>
#include <string>

namespace kvstrata {

using TenantId = uint32_t;

// Tenant 0 is the default tenant: every caller when no [[tenants]] are configured.
inline constexpr TenantId kDefaultTenant = 0;

struct Caller {
  TenantId tenant = kDefaultTenant;
  bool admin = true;  // may run admin operations and see every tenant's sessions
  // The tenant's name, mixed into the namespaces it registers; "" for the default tenant
  // of a single-tenant daemon (fingerprints stay as they were before tenants existed).
  std::string namespace_scope;
  // May map the whole L1 region (host mode): a tenant trusted with every tenant's bytes.
  bool shared_memory = true;
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_SESSION_CALLER_H_
