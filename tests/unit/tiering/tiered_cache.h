// Test scaffolding shared by the tiering, store and jobs tests: an L1 BlockCache over a heap
// "region" of 64 KiB slabs, with a TierManager and one lower tier beneath it (a FileTier,
// already warm, or any BlockTier such as the in-memory fake).
#ifndef KVSTRATA_TESTS_UNIT_TIERING_TIERED_CACHE_H_
#define KVSTRATA_TESTS_UNIT_TIERING_TIERED_CACHE_H_

#include <memory>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "daemon/cache/block_cache.h"
#include "daemon/cache/partitioned_cache.h"
#include "daemon/pool/slab_allocator.h"
#include "daemon/tiering/tier_manager.h"
#include "daemon/tiers/file_tier.h"
#include "gtest/gtest.h"

namespace kvstrata {

struct TieredCache {
  static constexpr uint64_t kSlab = 64 << 10;
  std::vector<char> region;
  std::unique_ptr<SlabAllocator> allocator;
  std::unique_ptr<TierManager> manager;
  std::unique_ptr<BlockCache> cache;
  std::unique_ptr<PartitionedCache> l1;  // over `cache` alone: what the tiers and jobs see
};

// Fills `out`: `slabs` slabs of L1 (watermarks 1.0: no eviction before it is full) over
// `lower` with `options`.
inline void BuildTieredCache(NamespaceRegistry* namespaces, uint64_t slabs,
                             absl::Duration promotion_wait, std::unique_ptr<BlockTier> lower,
                             LowerTierOptions options, TieredCache* out) {
  out->region.assign(slabs * TieredCache::kSlab, '\0');
  out->allocator = *SlabAllocator::Create({.region_bytes = slabs * TieredCache::kSlab,
                                           .slab_bytes = TieredCache::kSlab,
                                           .slot_alignment = 4096});
  out->manager = std::make_unique<TierManager>(namespaces, promotion_wait);
  out->manager->AddTier(std::move(lower), options);
  BlockCacheOptions cache_options;
  cache_options.high_watermark = 1.0;
  cache_options.low_watermark = 1.0;
  cache_options.listener = out->manager.get();
  out->cache = *BlockCache::Create(out->allocator.get(), cache_options);
  out->l1 = std::make_unique<PartitionedCache>(
      std::vector<PartitionedCache::Partition>{{out->cache.get(), 0, slabs * TieredCache::kSlab}});
  out->manager->AttachL1(out->l1.get(), out->region.data());
}

// The same over the FileTier `files`. Fails the test (ASSERT) when the tier does not open
// (or, with `wait_warm`, does not finish its warm-up scan in 5 s).
inline void BuildTieredCache(NamespaceRegistry* namespaces, uint64_t slabs,
                             absl::Duration promotion_wait, const FileTierOptions& files,
                             LowerTierOptions options, TieredCache* out, bool wait_warm = true) {
  auto tier = FileTier::Open(files);
  ASSERT_TRUE(tier.ok()) << tier.status();
  if (wait_warm) {
    ASSERT_TRUE((*tier)->WaitWarm(absl::Seconds(5)));
  }
  BuildTieredCache(namespaces, slabs, promotion_wait, *std::move(tier), options, out);
}

}  // namespace kvstrata

#endif  // KVSTRATA_TESTS_UNIT_TIERING_TIERED_CACHE_H_
