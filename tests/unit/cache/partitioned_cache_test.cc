#include "daemon/cache/partitioned_cache.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/pool/slab_allocator.h"

namespace kvstrata {
namespace {

constexpr uint64_t kSlab = 64 << 10;
constexpr uint64_t kBlock = 16 << 10;
constexpr SessionId kSession = 7;
constexpr NamespaceId kShared = 1, kTenant = 2;

// Partition 0: 4 slabs at offset 0; partition 1: 2 slabs right after it.
class PartitionedCacheTest : public ::testing::Test {
 protected:
  PartitionedCacheTest() {
    uint64_t base = 0;
    std::vector<PartitionedCache::Partition> parts;
    for (uint64_t slabs : {4, 2}) {
      allocators_.push_back(*SlabAllocator::Create(
          {.region_bytes = slabs * kSlab, .slab_bytes = kSlab, .base_offset = base}));
      BlockCacheOptions options;
      options.high_watermark = 1.0;
      options.low_watermark = 1.0;
      options.first_id = PartitionedCache::PartitionFirstId(caches_.size());
      caches_.push_back(*BlockCache::Create(allocators_.back().get(), options));
      parts.push_back({caches_.back().get(), base, slabs * kSlab});
      base += slabs * kSlab;
    }
    cache_ = std::make_unique<PartitionedCache>(std::move(parts));
    cache_->AssignPartition(kTenant, 1);
  }

  // Stores `count` blocks of `ns`; returns their offsets.
  std::vector<uint64_t> Store(NamespaceId ns, const std::string& prefix, int count) {
    std::vector<std::string> keys;
    for (int i = 0; i < count; ++i) keys.push_back(prefix + std::to_string(i));
    std::vector<std::string_view> views(keys.begin(), keys.end());
    auto reserved = cache_->ReserveStore(kSession, ns, kBlock, views);
    EXPECT_TRUE(reserved.ok()) << reserved.status();
    std::vector<uint64_t> offsets;
    for (const StoreSlot& slot : reserved->slots) {
      if (slot.status == StoreStatus::kReserved) offsets.push_back(slot.offset);
    }
    EXPECT_TRUE(cache_->CommitStore(kSession, reserved->reservation, std::nullopt).ok());
    return offsets;
  }

  std::vector<std::unique_ptr<SlabAllocator>> allocators_;
  std::vector<std::unique_ptr<BlockCache>> caches_;
  std::unique_ptr<PartitionedCache> cache_;
};

TEST_F(PartitionedCacheTest, ANamespaceLivesInItsPartitionsRange) {
  EXPECT_EQ(cache_->PartitionOf(kShared), 0u);
  EXPECT_EQ(cache_->PartitionOf(kTenant), 1u);
  for (uint64_t offset : Store(kShared, "s", 8)) EXPECT_LT(offset, 4 * kSlab);
  for (uint64_t offset : Store(kTenant, "t", 8)) {
    EXPECT_GE(offset, 4 * kSlab);
    EXPECT_LT(offset, 6 * kSlab);
  }
  EXPECT_EQ(cache_->PartitionStats(0).blocks, 8u);
  EXPECT_EQ(cache_->PartitionStats(1).blocks, 8u);
  EXPECT_EQ(cache_->Stats().blocks, 16u);
  EXPECT_EQ(cache_->Stats().capacity_bytes, 6 * kSlab);
}

TEST_F(PartitionedCacheTest, APartitionIsItsTenantsQuota) {
  Store(kShared, "s", 16);  // partition 0 full
  // Partition 1 holds 8 blocks: 8 more evict only partition 1's own blocks.
  Store(kTenant, "t", 8);
  Store(kTenant, "u", 8);
  EXPECT_EQ(cache_->PartitionStats(1).blocks, 8u);
  EXPECT_EQ(cache_->PartitionStats(1).evictions, 8u);
  EXPECT_EQ(cache_->PartitionStats(0).blocks, 16u);
  EXPECT_EQ(cache_->PartitionStats(0).evictions, 0u);
}

TEST_F(PartitionedCacheTest, IdsNameTheirPartition) {
  std::vector<std::string> keys = {"a", "b"};
  std::vector<std::string_view> views(keys.begin(), keys.end());
  auto reserved = cache_->ReserveStore(kSession, kTenant, kBlock, views);
  ASSERT_TRUE(reserved.ok());
  EXPECT_EQ(reserved->reservation >> 48, 1u);
  ASSERT_TRUE(cache_->CommitStore(kSession, reserved->reservation, std::nullopt).ok());
  auto hit = cache_->Lookup(kSession, kTenant, views, absl::Seconds(5));
  ASSERT_TRUE(hit.ok());
  ASSERT_TRUE(hit->lease.has_value());
  EXPECT_EQ(*hit->lease >> 48, 1u);
  // A lease of partition 1 cannot load a namespace of partition 0.
  EXPECT_EQ(cache_->AcquireLoad(kSession, kShared, views, *hit->lease).status().code(),
            absl::StatusCode::kNotFound);
  auto load = cache_->AcquireLoad(kSession, kTenant, views, *hit->lease);
  ASSERT_TRUE(load.ok()) << load.status();
  EXPECT_EQ(load->load >> 48, 1u);
  EXPECT_TRUE(cache_->ReleaseLoad(kSession, load->load).ok());
  // Ids of no partition are unknown.
  uint64_t stray = PartitionedCache::PartitionFirstId(9);
  EXPECT_EQ(cache_->ReleaseLoad(kSession, stray).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(cache_->ReleaseLease(kSession, stray).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(cache_->AbortStore(kSession, stray).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(cache_->CommitStore(kSession, stray, std::nullopt).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(PartitionedCacheTest, SessionWideCallsVisitEveryPartition) {
  std::vector<std::string> keys = {"x"};
  std::vector<std::string_view> views(keys.begin(), keys.end());
  ASSERT_TRUE(cache_->ReserveStore(kSession, kShared, kBlock, views).ok());
  ASSERT_TRUE(cache_->ReserveStore(kSession, kTenant, kBlock, views).ok());
  SessionEndResult ended = cache_->EndSession(kSession);
  EXPECT_EQ(ended.reservations, 2u);
  Store(kShared, "s", 2);
  Store(kTenant, "t", 3);
  EXPECT_EQ(cache_->VisibleKeys(std::nullopt).size(), 5u);
  EXPECT_EQ(cache_->VisibleKeys(kTenant).size(), 3u);
  EXPECT_EQ(cache_->Clear(std::nullopt), 5u);
}

}  // namespace
}  // namespace kvstrata
