// EvictionPolicy: decides which tracked entry leaves a tier next. One implementation per
// algorithm (LRU, ARC, S3-FIFO), built by MakeEvictionPolicy from its name.
//
// Entries are named by a 64-bit id chosen by the caller (BlockCache uses the key
// fingerprint and keeps ids unique among resident entries), so policies store 8 bytes per
// entry and may remember evicted ids ("ghosts") to recognise returning keys.
//
// Thread safety: NOT thread-safe. The owner serialises every call with its own lock.
// Ownership: the policy owns only its bookkeeping; it never frees the entries it names.
#ifndef KVSTRATA_DAEMON_EVICTION_EVICTION_POLICY_H_
#define KVSTRATA_DAEMON_EVICTION_EVICTION_POLICY_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"

namespace kvstrata {

class EvictionPolicy {
 public:
  using Id = uint64_t;
  // Returns true when the entry may be evicted now (not pinned, leased or in flight).
  using MayEvict = absl::FunctionRef<bool(Id)>;

  virtual ~EvictionPolicy() = default;

  virtual std::string_view Name() const = 0;
  // Starts tracking `id` (a new resident entry). REQUIRES: !Contains(id).
  virtual void OnInsert(Id id) = 0;
  // Records a hit on a tracked entry; ignored when `id` is not tracked.
  virtual void OnAccess(Id id) = 0;
  // Stops tracking `id` (erased by the owner, not evicted); ignored when not tracked.
  virtual void OnErase(Id id) = 0;
  // Chooses a tracked entry for which `may_evict` is true, stops tracking it and returns
  // it; nullopt when no tracked entry may be evicted. Never returns an untracked id.
  virtual std::optional<Id> PickVictim(MayEvict may_evict) = 0;
  virtual bool Contains(Id id) const = 0;
  // Number of tracked (resident) entries; ghosts are not counted.
  virtual size_t Size() const = 0;
  // The expected number of resident entries, used to size internal queues and ghosts.
  virtual void SetCapacity(size_t entries) = 0;
};

// "lru", "arc" or "s3fifo"; INVALID_ARGUMENT for any other name.
absl::StatusOr<std::unique_ptr<EvictionPolicy>> MakeEvictionPolicy(std::string_view name,
                                                                   size_t capacity_entries);

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_EVICTION_EVICTION_POLICY_H_
