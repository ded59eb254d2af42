// BlockEntry: what the index knows about one block (16 bytes). Plain value type.
#ifndef KVSTRATA_DAEMON_INDEX_BLOCK_ENTRY_H_
#define KVSTRATA_DAEMON_INDEX_BLOCK_ENTRY_H_

#include <cstdint>

#include "daemon/common/tier.h"

namespace kvstrata {

struct BlockEntry {
  enum Flags : uint8_t {
    kPending = 1,  // reserved by a store, not yet committed: invisible to lookups
    kPinned = 2,   // pinned by an admin: never evicted
  };

  uint64_t offset = 0;     // L1 slot offset in the shared region (valid when tiers has kL1)
  uint32_t refs = 0;       // leases + loads holding this block; > 0 means never evicted
  uint8_t tiers = 0;       // bitmask of TierBit (daemon/common/tier.h)
  uint8_t size_class = 0;  // L1 slab size class
  uint8_t flags = 0;       // Flags
  uint8_t reserved = 0;

  bool pending() const { return flags & kPending; }
  bool pinned() const { return flags & kPinned; }
  bool visible() const { return tiers != 0 && !pending(); }
};

static_assert(sizeof(BlockEntry) == 16, "BlockEntry must stay small");

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_INDEX_BLOCK_ENTRY_H_
