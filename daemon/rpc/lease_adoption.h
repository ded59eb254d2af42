// AdoptLease: a load naming a lease that another session of the same tenant took. An
// engine's scheduler looks up (and leases) what its workers then load, each worker with a
// session of its own: the lease travels to the worker's load, which consumes it (its pins
// pass to the load), so nothing releases it separately (docs/wire-protocol.md). The lease
// passes to the loading session first (LeaseTable::Transfer), then the load consumes it as
// its own. Sessions of one tenant trust each other (docs/security.md); another tenant's
// lease is refused.
//
// Thread-safe (the lease table's lock; the session check is made outside it).
#ifndef KVSTRATA_DAEMON_RPC_LEASE_ADOPTION_H_
#define KVSTRATA_DAEMON_RPC_LEASE_ADOPTION_H_

#include "absl/status/statusor.h"
#include "daemon/common/ids.h"
#include "daemon/rpc/service_context.h"

namespace kvstrata {

// True when `session` may now consume `lease` (its own, or handed over from a session of
// `tenant`); false when the lease has already ended (consumed, released, reaped: the
// caller loads without it, or reports NOT_FOUND as it did before). FAILED_PRECONDITION
// for a lease of another tenant's session.
absl::StatusOr<bool> AdoptLease(const ServiceContext& context, TenantId tenant, SessionId session,
                                LeaseId lease);

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_RPC_LEASE_ADOPTION_H_
