// The L1 tier as the daemon runs it: the shared-memory region (memfds, populated at start),
// cut into partitions — partition 0 shared by the tenants without an L1 share of their own,
// then one per tenant with one (`shares`, docs/security.md) — with a slab allocator and a
// BlockCache per partition, and the PartitionedCache over them, built from the [l1]
// configuration.
// Members are created together and destroyed in reverse order. Thread-safe as its parts.
#ifndef KVSTRATA_DAEMON_SERVER_L1_POOL_H_
#define KVSTRATA_DAEMON_SERVER_L1_POOL_H_

#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/cache/block_cache.h"
#include "daemon/cache/partitioned_cache.h"
#include "daemon/config/config.h"
#include "daemon/pool/shm_region.h"
#include "daemon/pool/slab_allocator.h"

namespace kvstrata {

struct L1Pool {
  std::unique_ptr<ShmRegion> region;
  std::vector<std::unique_ptr<SlabAllocator>> allocators;  // one per partition
  std::vector<std::unique_ptr<BlockCache>> caches;         // one per partition
  std::unique_ptr<PartitionedCache> cache;                 // over `caches`

  // RESOURCE_EXHAUSTED when the region cannot be created or mapped, INVALID_ARGUMENT when
  // the shares leave partition 0 less than one slab. `may_write`: see
  // BlockCacheOptions::may_write. `shares`: the bytes of partitions 1, 2, ... (each rounded
  // down to whole slabs); partition 0 gets the rest of l1.capacity.
  static absl::StatusOr<L1Pool> Create(const L1Config& l1, const SessionsConfig& sessions,
                                       TierListener* listener,
                                       std::function<bool(SessionId)> may_write = {},
                                       const std::vector<uint64_t>& shares = {});

 private:
  static absl::StatusOr<std::unique_ptr<BlockCache>> CreateCache(
      const L1Config& l1, const SessionsConfig& sessions, TierListener* listener,
      const std::function<bool(SessionId)>& may_write, SlabAllocator* allocator, size_t partition);
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_SERVER_L1_POOL_H_
