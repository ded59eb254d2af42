#include "daemon/rpc/lease_adoption.h"

#include "absl/strings/str_cat.h"

namespace kvstrata {

absl::StatusOr<bool> AdoptLease(const ServiceContext& context, TenantId tenant, SessionId session,
                                LeaseId lease) {
  absl::StatusOr<SessionId> owner = context.cache->LeaseOwner(lease);
  if (absl::IsNotFound(owner.status())) return false;
  if (!owner.ok()) return owner.status();
  if (*owner == session) return true;
  if (!context.sessions->Check(*owner, tenant).ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("lease ", lease, " belongs to a session of another tenant"));
  }
  absl::Status moved = context.cache->TransferLease(lease, *owner, session);
  if (absl::IsNotFound(moved)) return false;  // It ended meanwhile.
  if (!moved.ok()) return moved;
  return true;
}

}  // namespace kvstrata
