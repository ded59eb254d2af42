// BlockEntry: what the index knows about one block (16 bytes). Plain value type.
#ifndef KVSTRATA_DAEMON_INDEX_BLOCK_ENTRY_H_
#define KVSTRATA_DAEMON_INDEX_BLOCK_ENTRY_H_

#include <cstdint>

namespace kvstrata {

// Tier bits of BlockEntry::tiers. L1 = pinned DRAM pool, L2 = local NVMe, L3 = shared FS.
enum class Tier : uint8_t { kL1 = 1, kL2 = 2, kL3 = 4 };

inline constexpr uint8_t TierBit(Tier t) { return static_cast<uint8_t>(t); }

// The fastest tier present in `tiers` (a non-zero mask).
inline constexpr Tier FastestTier(uint8_t tiers) {
  return static_cast<Tier>(tiers & static_cast<uint8_t>(-tiers));
}

struct BlockEntry {
  enum Flags : uint8_t {
    kPending = 1,  // reserved by a store, not yet committed: invisible to lookups
    kPinned = 2,   // pinned by an admin: never evicted
  };

  uint64_t offset = 0;     // L1 slot offset in the shared region (valid when tiers has kL1)
  uint32_t refs = 0;       // leases + loads holding this block; > 0 means never evicted
  uint8_t tiers = 0;       // bitmask of Tier
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
