// BlockCache: eviction under a small pool, watermarks, pins, admission, slab moves.
#include "tests/unit/cache/cache_fixture.h"

namespace kvstrata {
namespace {

using CachePressureTest = CacheTest;

TEST_F(CachePressureTest, EvictsLeastRecentlyUsedWhenFull) {
  for (int i = 0; i < 20; ++i) {
    ASSERT_EQ(Store({"k" + std::to_string(i)})[0], StoreStatus::kReserved);
  }
  CacheStats st = cache_->Stats();
  EXPECT_EQ(st.blocks, 8u);
  EXPECT_EQ(st.evictions, 12u);
  EXPECT_EQ(st.used_bytes, st.capacity_bytes);
  EXPECT_EQ(Hits({"k11"}), 0u);
  EXPECT_EQ(Hits(Names(12, 8)), 8u);
  EXPECT_EQ(listener_.removed().front(), "k0");
  EXPECT_EQ(listener_.causes().front(), RemovalCause::kEvicted);
}

TEST_F(CachePressureTest, EvictsDownToTheLowWatermark) {
  BlockCacheOptions o = Opts();
  o.high_watermark = 0.75;  // 6 of 8 blocks
  o.low_watermark = 0.5;    // 4 of 8 blocks
  Build(2, o);
  Store(Names(0, 6));
  EXPECT_EQ(cache_->Stats().evictions, 0u);
  EXPECT_EQ(Store({"x"})[0], StoreStatus::kReserved);  // 7 > 6: evict until 3 + 1 <= 4
  CacheStats st = cache_->Stats();
  EXPECT_EQ(st.evictions, 3u);
  EXPECT_EQ(st.blocks, 4u);
}

TEST_F(CachePressureTest, AdminPinnedBlocksAreNeverEvicted) {
  auto all = Names(0, 8);
  Store(all);
  auto views = Views(all);
  EXPECT_EQ(*cache_->Pin(kNs, views), 8u);
  EXPECT_EQ(Store({"x"})[0], StoreStatus::kDropped);
  EXPECT_EQ(*cache_->Evict(kNs, views), 0u);
  std::vector<std::string_view> k3 = {"k3"};
  EXPECT_EQ(*cache_->Unpin(kNs, k3), 1u);
  EXPECT_EQ(Store({"x"})[0], StoreStatus::kReserved);
  EXPECT_EQ(Hits({"k3"}), 0u);
  EXPECT_EQ(Hits(Names(0, 3)), 3u);
}

TEST_F(CachePressureTest, PinnedTellsWhichKeysAdminEvictKeepsAndEvictMarksTheRest) {
  Store({"a", "b", "c"});
  std::vector<std::string_view> b = {"b"};
  ASSERT_EQ(*cache_->Pin(kNs, b), 1u);
  std::vector<std::string_view> asked = {"a", "b", "c", "absent"};
  EXPECT_EQ(*cache_->Pinned(kNs, asked), (std::vector<bool>{false, true, false, false}));
  std::vector<bool> evicted(asked.size(), false);
  EXPECT_EQ(*cache_->Evict(kNs, asked, &evicted), 2u);
  EXPECT_EQ(evicted, (std::vector<bool>{true, false, true, false}));
}

TEST_F(CachePressureTest, AdmissionWaitsForRepeatedLookups) {
  BlockCacheOptions o = Opts();
  o.admission_min_lookups = 2;
  Build(2, o);
  EXPECT_EQ(Store({"a"})[0], StoreStatus::kNotAdmitted);
  Hits({"a"});
  EXPECT_EQ(Store({"a"})[0], StoreStatus::kNotAdmitted);
  Hits({"a"});
  EXPECT_EQ(Store({"a"})[0], StoreStatus::kReserved);
  EXPECT_EQ(cache_->Stats().not_admitted, 2u);
}

TEST_F(CachePressureTest, SlabMovesToAStarvingClass) {
  Store(Names(0, 8));  // both slabs hold 16 KiB blocks
  // 32 KiB blocks of another namespace: evictions must empty a whole slab, which moves.
  std::vector<StoreStatus> big = Store({"big0", "big1"}, 1, kNs + 1, 2 * kBlock);
  EXPECT_EQ(big, (std::vector<StoreStatus>{StoreStatus::kReserved, StoreStatus::kReserved}));
  CacheStats st = cache_->Stats();
  EXPECT_EQ(st.slab_moves, 1u);
  EXPECT_EQ(st.blocks_per_namespace[kNs + 1], 2u);
  EXPECT_EQ(st.blocks_per_namespace[kNs], 4u);
  EXPECT_EQ(st.used_bytes, st.capacity_bytes);
}

TEST_F(CachePressureTest, EveryPolicyWorksBehindTheCache) {
  for (const char* name : {"lru", "arc", "s3fifo"}) {
    BlockCacheOptions o = Opts();
    o.eviction_policy = name;
    Build(2, o);
    for (int i = 0; i < 30; ++i) {
      ASSERT_EQ(Store({"k" + std::to_string(i)})[0], StoreStatus::kReserved) << name;
    }
    EXPECT_EQ(cache_->Stats().blocks, 8u) << name;
  }
  BlockCacheOptions bad = Opts();
  bad.eviction_policy = "clock";
  EXPECT_EQ(BlockCache::Create(allocator_.get(), bad).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvstrata
