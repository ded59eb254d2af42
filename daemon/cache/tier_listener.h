// TierListener: the one hook through which a tier reports blocks appearing and leaving
// (for metrics and KV events). Calls are made with the tier's lock held: implementations
// must be quick and must not call back into the tier.
#ifndef KVSTRATA_DAEMON_CACHE_TIER_LISTENER_H_
#define KVSTRATA_DAEMON_CACHE_TIER_LISTENER_H_

#include <cstdint>

#include "daemon/common/tier.h"
#include "daemon/index/block_entry.h"
#include "daemon/index/block_key.h"

namespace kvstrata {

class TierListener {
 public:
  virtual ~TierListener() = default;
  // A committed block became visible in `tier`.
  virtual void OnStored(NamespaceId ns, const BlockKey& key, Tier tier) = 0;
  // An L1 block chosen for eviction, before its slot is freed: its bytes are still at
  // [offset, offset + length) of the shared region (write-back copies them from there).
  virtual void OnEvicting(NamespaceId /*ns*/, const BlockKey& /*key*/, uint64_t /*offset*/,
                          uint64_t /*length*/) {}
  // A visible block left `tier`.
  virtual void OnRemoved(NamespaceId ns, const BlockKey& key, Tier tier, RemovalCause cause) = 0;
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_CACHE_TIER_LISTENER_H_
