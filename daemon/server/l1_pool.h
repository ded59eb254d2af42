// The L1 tier as the daemon runs it: the shared-memory region (memfd, populated at start),
// its slab allocator and the BlockCache over them, built from the [l1] configuration.
// Members are created together and destroyed in reverse order. Thread-safe as its parts.
#ifndef KVSTRATA_DAEMON_SERVER_L1_POOL_H_
#define KVSTRATA_DAEMON_SERVER_L1_POOL_H_

#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "daemon/cache/block_cache.h"
#include "daemon/config/config.h"
#include "daemon/pool/shm_region.h"
#include "daemon/pool/slab_allocator.h"

namespace kvstrata {

struct L1Pool {
  std::unique_ptr<ShmRegion> region;
  std::unique_ptr<SlabAllocator> allocator;
  std::unique_ptr<BlockCache> cache;

  // RESOURCE_EXHAUSTED when the region cannot be created or mapped. `may_write`: see
  // BlockCacheOptions::may_write.
  static absl::StatusOr<L1Pool> Create(const L1Config& l1, const SessionsConfig& sessions,
                                       TierListener* listener,
                                       std::function<bool(SessionId)> may_write = {});
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_SERVER_L1_POOL_H_
