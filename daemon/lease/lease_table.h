// LeaseTable: time-limited claims on a set of blocks, each owned by one session.
//
// A lease is created by a lookup (its keys are the blocks the owner pinned), and ends in
// exactly one way: consumed by a load, released, expired (ReapExpired), or dropped with its
// session (DropSession). Every way out returns the Lease record so that the owner of the
// pins (BlockCache) unpins its keys: the table itself only does the bookkeeping.
//
// Thread safety: thread-safe (one internal mutex); ReapExpired may run on a background
// thread. Ownership: the clock is not owned and must outlive the table.
#ifndef KVSTRATA_DAEMON_LEASE_LEASE_TABLE_H_
#define KVSTRATA_DAEMON_LEASE_LEASE_TABLE_H_

#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "daemon/common/clock.h"
#include "daemon/common/ids.h"
#include "daemon/common/mutex.h"
#include "daemon/index/block_key.h"

namespace kvstrata {

// Move-only: the keys it holds are pins that must be dropped exactly once.
struct Lease {
  LeaseId id = 0;
  SessionId session = 0;
  absl::Time expires;
  std::vector<BlockKey> keys;

  Lease() = default;
  Lease(Lease&&) = default;
  Lease& operator=(Lease&&) = default;
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
};

class LeaseTable {
 public:
  // Lease ids count up from `first_id` (a partitioned L1 gives each partition its range).
  explicit LeaseTable(Clock* clock, LeaseId first_id = 1) : clock_(clock), next_id_(first_id) {}

  // Records a lease on `keys` for `session` that expires after `ttl`; ids start at 1.
  LeaseId Create(SessionId session, std::vector<BlockKey> keys, absl::Duration ttl);
  // Removes and returns the lease for a load. NOT_FOUND when unknown or already ended
  // (an expired lease that ReapExpired has not reached yet is still honoured: its pins
  // were held all along); FAILED_PRECONDITION when it belongs to another session.
  absl::StatusOr<Lease> Consume(SessionId session, LeaseId id);
  // The session that owns a live lease; NOT_FOUND when unknown or ended.
  absl::StatusOr<SessionId> Owner(LeaseId id) const;
  // Hands a live lease of `from` to `to` (the load of another session of the same engine
  // consumes it: the caller checks that they may share it). NOT_FOUND when unknown or
  // ended; FAILED_PRECONDITION when it is not `from`'s (any more).
  absl::Status Transfer(LeaseId id, SessionId from, SessionId to);
  // Same as Consume; named for the "client gives it back unused" path.
  absl::StatusOr<Lease> Release(SessionId session, LeaseId id) { return Consume(session, id); }
  // Adds `keys` to a live lease of `session`; false (nothing added) when it has ended or
  // belongs to another session. The caller pins the keys when this returns true.
  bool Extend(SessionId session, LeaseId id, absl::Span<const BlockKey> keys);
  // Removes and returns every lease of `session`.
  std::vector<Lease> DropSession(SessionId session);
  // Removes and returns every lease whose expiry is <= now.
  std::vector<Lease> ReapExpired();

  size_t Size() const;

 private:
  // The live lease `id` of `session`; NOT_FOUND / FAILED_PRECONDITION.
  absl::StatusOr<Lease*> OwnedLocked(LeaseId id, SessionId session)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Clock* const clock_;
  mutable Mutex mu_;
  LeaseId next_id_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<LeaseId, Lease> leases_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_LEASE_LEASE_TABLE_H_
