#include "daemon/lease/lease_table.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kvstrata {

LeaseId LeaseTable::Create(SessionId session, std::vector<BlockKey> keys, absl::Duration ttl) {
  absl::Time expires = clock_->Now() + ttl;
  MutexLock lock(&mu_);
  LeaseId id = next_id_++;
  Lease& lease = leases_[id];
  lease.id = id;
  lease.session = session;
  lease.expires = expires;
  lease.keys = std::move(keys);
  return id;
}

absl::StatusOr<Lease*> LeaseTable::OwnedLocked(LeaseId id, SessionId session) {
  auto it = leases_.find(id);
  if (it == leases_.end()) {
    return absl::NotFoundError(absl::StrCat("lease ", id, " is unknown or has ended"));
  }
  if (it->second.session != session) {
    return absl::FailedPreconditionError(absl::StrCat("lease ", id, " belongs to another session"));
  }
  return &it->second;
}

absl::StatusOr<Lease> LeaseTable::Consume(SessionId session, LeaseId id) {
  MutexLock lock(&mu_);
  absl::StatusOr<Lease*> found = OwnedLocked(id, session);
  if (!found.ok()) return found.status();
  // An expired lease that the reaper has not reached yet is still honoured: its pins
  // were held the whole time, so the blocks are intact.
  Lease lease = std::move(**found);
  leases_.erase(id);
  return lease;
}

absl::StatusOr<SessionId> LeaseTable::Owner(LeaseId id) const {
  MutexLock lock(&mu_);
  auto it = leases_.find(id);
  if (it == leases_.end()) {
    return absl::NotFoundError(absl::StrCat("lease ", id, " is unknown or has ended"));
  }
  return it->second.session;
}

absl::Status LeaseTable::Transfer(LeaseId id, SessionId from, SessionId to) {
  MutexLock lock(&mu_);
  absl::StatusOr<Lease*> found = OwnedLocked(id, from);
  if (!found.ok()) return found.status();
  (*found)->session = to;
  return absl::OkStatus();
}

bool LeaseTable::Extend(SessionId session, LeaseId id, absl::Span<const BlockKey> keys) {
  MutexLock lock(&mu_);
  auto it = leases_.find(id);
  if (it == leases_.end() || it->second.session != session) return false;
  it->second.keys.insert(it->second.keys.end(), keys.begin(), keys.end());
  return true;
}

std::vector<Lease> LeaseTable::DropSession(SessionId session) {
  std::vector<Lease> out;
  MutexLock lock(&mu_);
  for (auto it = leases_.begin(); it != leases_.end();) {
    if (it->second.session == session) {
      out.push_back(std::move(it->second));
      leases_.erase(it++);
    } else {
      ++it;
    }
  }
  return out;
}

std::vector<Lease> LeaseTable::ReapExpired() {
  absl::Time now = clock_->Now();
  std::vector<Lease> out;
  MutexLock lock(&mu_);
  for (auto it = leases_.begin(); it != leases_.end();) {
    if (it->second.expires <= now) {
      out.push_back(std::move(it->second));
      leases_.erase(it++);
    } else {
      ++it;
    }
  }
  return out;
}

size_t LeaseTable::Size() const {
  MutexLock lock(&mu_);
  return leases_.size();
}

}  // namespace kvstrata
