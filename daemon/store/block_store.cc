#include "daemon/store/block_store.h"

#include <algorithm>
#include <utility>

namespace kvstrata {

absl::Duration BlockStore::LeaseTtl(absl::Duration requested) const {
  absl::Duration ttl = requested <= absl::ZeroDuration() ? options_.default_lease_ttl : requested;
  return std::min(ttl, options_.max_lease_ttl);
}

absl::StatusOr<LookupResult> BlockStore::Lookup(SessionId session, NamespaceId ns, Keys keys,
                                                std::optional<absl::Duration> lease_ttl) {
  absl::StatusOr<LookupResult> result = l1_->Lookup(session, ns, keys, lease_ttl);
  if (result.ok() && lower_ != nullptr)
    lower_->ExtendLookup(session, ns, keys, lease_ttl, &*result);
  return result;
}

BlockStore::PendingLoad BlockStore::BeginLoad(NamespaceId ns, Keys keys) {
  return lower_ != nullptr ? lower_->StartLoad(ns, keys) : PendingLoad{};
}

absl::StatusOr<LoadResult> BlockStore::FinishLoad(SessionId session, NamespaceId ns, Keys keys,
                                                  std::optional<LeaseId> lease,
                                                  PendingLoad pending) {
  if (lower_ != nullptr) lower_->WaitForLoad(pending);
  // `pending` keeps the promoted blocks pinned until AcquireLoad has pinned them itself.
  return l1_->AcquireLoad(session, ns, keys, lease);
}

absl::StatusOr<std::vector<std::optional<Tier>>> BlockStore::Peek(NamespaceId ns, Keys keys) {
  absl::StatusOr<std::vector<std::optional<Tier>>> where = l1_->Peek(ns, keys);
  if (where.ok() && lower_ != nullptr) lower_->Peek(ns, keys, &*where);
  return where;
}

}  // namespace kvstrata
