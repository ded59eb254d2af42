// BlockStore: the "L1 first, then the lower tiers" protocol in one place, over a real L1
// (BlockCache on a heap region) and a TierManager with the in-memory fake tier beneath it.
#include "daemon/store/block_store.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/testing/memory_tier.h"
#include "gtest/gtest.h"
#include "tests/unit/tiering/tiered_cache.h"
#include "tests/unit/tiers/tier_test_data.h"

namespace kvstrata {
namespace {

constexpr SessionId kClient = 7;
constexpr uint64_t kBlock = 16 << 10;

class BlockStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ns_ = namespaces_.Register(kClient, OpaqueTestSpec(kBlock, "store-test"))->id;
    auto lower = std::make_unique<MemoryTier>(Tier::kL2);
    lower_ = lower.get();
    BuildTieredCache(&namespaces_, 8, absl::Seconds(5), std::move(lower), {}, &tiered_);
    store_ = std::make_unique<BlockStore>(tiered_.l1.get(), tiered_.manager.get(),
                                          BlockStoreOptions{absl::Seconds(5), absl::Minutes(1)});
  }
  void TearDown() override {
    store_.reset();
    tiered_.manager->Stop();
  }

  std::vector<std::string> Keys(int n) {
    std::vector<std::string> keys;
    for (int i = 0; i < n; ++i) keys.push_back(absl::StrCat("k", i));
    return keys;
  }
  static std::vector<std::string_view> Views(const std::vector<std::string>& keys) {
    return {keys.begin(), keys.end()};
  }
  // Stores the keys through the store (payload seed + i) and waits until the lower tier
  // has every one and the writes are over (write-through: a write holds its L1 block until
  // it ends, which is after the lower tier counts the block).
  void StoreAll(const std::vector<std::string>& keys, int seed) {
    auto reserved = store_->l1().ReserveStore(kClient, ns_, kBlock, Views(keys));
    ASSERT_TRUE(reserved.ok()) << reserved.status();
    for (size_t i = 0; i < keys.size(); ++i) {
      const StoreSlot& slot = reserved->slots[i];
      ASSERT_EQ(slot.status, StoreStatus::kReserved);
      std::string data = Payload(kBlock, seed + static_cast<int>(i));
      std::memcpy(tiered_.region.data() + slot.offset, data.data(), kBlock);
    }
    ASSERT_TRUE(store_->l1().CommitStore(kClient, reserved->reservation, std::nullopt).ok());
    absl::Time deadline = absl::Now() + absl::Seconds(10);
    auto writing = [&] { return store_->LowerTiers()[0].queued_writes > 0; };
    while ((lower_->Stats().blocks < keys.size() || writing()) && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    ASSERT_EQ(lower_->Stats().blocks, keys.size());
    ASSERT_FALSE(writing());
  }

  NamespaceRegistry namespaces_;
  NamespaceId ns_ = 0;
  MemoryTier* lower_ = nullptr;
  TieredCache tiered_;
  std::unique_ptr<BlockStore> store_;
};

TEST_F(BlockStoreTest, LeaseTtlIsTheDefaultOrTheAskedOneUpToTheMaximum) {
  EXPECT_EQ(store_->LeaseTtl(absl::ZeroDuration()), absl::Seconds(5));
  EXPECT_EQ(store_->LeaseTtl(absl::Seconds(12)), absl::Seconds(12));
  EXPECT_EQ(store_->LeaseTtl(absl::Hours(1)), absl::Minutes(1));
}

TEST_F(BlockStoreTest, ALookupContinuesBelowL1) {
  std::vector<std::string> keys = Keys(4);
  StoreAll(keys, 10);
  auto l1_only = tiered_.l1->Lookup(kClient, ns_, Views(keys), std::nullopt);
  ASSERT_TRUE(l1_only.ok());
  EXPECT_EQ(l1_only->hits, 4u);
  ASSERT_EQ(tiered_.l1->Clear(ns_), 4u);  // Only the lower tier has them now.
  auto found = store_->Lookup(kClient, ns_, Views(keys), std::nullopt);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->hits, 4u);
  EXPECT_EQ(found->tiers, std::vector<Tier>(4, Tier::kL2));
}

TEST_F(BlockStoreTest, ALeasedLookupPromotesItsHitsBelowL1UnlessAskedNotTo) {
  std::vector<std::string> keys = Keys(4);
  StoreAll(keys, 15);
  ASSERT_EQ(tiered_.l1->Clear(ns_), 4u);
  // Skipped: answered (tiers, a lease), nothing read from below, still only in L2.
  auto skipped =
      store_->Lookup(kClient, ns_, Views(keys), absl::Seconds(30), LookupPromotion::kSkip);
  ASSERT_TRUE(skipped.ok()) << skipped.status();
  EXPECT_EQ(skipped->hits, 4u);
  EXPECT_EQ(skipped->tiers, std::vector<Tier>(4, Tier::kL2));
  EXPECT_TRUE(skipped->lease.has_value());
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(store_->LowerTiers()[0].promotions, 0u);
  EXPECT_EQ(store_->LowerTiers()[0].promoted_blocks, 0u);
  EXPECT_EQ(lower_->Stats().hits, 0u);  // no read
  auto where = store_->Peek(ns_, Views(keys));
  ASSERT_TRUE(where.ok());
  EXPECT_EQ(*where, std::vector<std::optional<Tier>>(4, Tier::kL2));
  ASSERT_TRUE(store_->l1().ReleaseLease(kClient, *skipped->lease).ok());
  // A load decided afterwards promotes what it needs itself.
  std::vector<std::string_view> views = Views(keys);
  auto loaded =
      store_->AcquireLoad(kClient, ns_, absl::MakeConstSpan(views).first(2), std::nullopt);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->slots[1].status, LoadStatus::kReady);
  EXPECT_TRUE(store_->l1().ReleaseLoad(kClient, loaded->load).ok());
  EXPECT_EQ(store_->LowerTiers()[0].promoted_blocks, 2u);
  // Started (the default): the other two come up into the lease.
  auto started = store_->Lookup(kClient, ns_, Views(keys), absl::Seconds(30));
  ASSERT_TRUE(started.ok()) << started.status();
  EXPECT_EQ(started->tiers, (std::vector<Tier>{Tier::kL1, Tier::kL1, Tier::kL2, Tier::kL2}));
  // Counted when read, in L1 once committed: wait for both (TSan runs them far apart).
  const std::vector<std::optional<Tier>> all_l1(4, Tier::kL1);
  absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (
      (store_->LowerTiers()[0].promoted_blocks < 4 || *store_->Peek(ns_, Views(keys)) != all_l1) &&
      absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_EQ(store_->LowerTiers()[0].promoted_blocks, 4u);
  EXPECT_EQ(*store_->Peek(ns_, Views(keys)), all_l1);
  ASSERT_TRUE(store_->l1().ReleaseLease(kClient, *started->lease).ok());
  // Without a lease nothing is promoted, skipped or not.
  ASSERT_EQ(tiered_.l1->Clear(ns_), 4u);
  ASSERT_TRUE(store_->Lookup(kClient, ns_, Views(keys), std::nullopt).ok());
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(store_->LowerTiers()[0].promoted_blocks, 4u);
}

TEST_F(BlockStoreTest, ALoadBringsItsBlocksUpFromBelowByteExact) {
  std::vector<std::string> keys = Keys(4);
  StoreAll(keys, 20);
  ASSERT_EQ(tiered_.l1->Clear(ns_), 4u);
  auto loaded = store_->AcquireLoad(kClient, ns_, Views(keys), std::nullopt);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  for (size_t i = 0; i < keys.size(); ++i) {
    const LoadSlot& slot = loaded->slots[i];
    ASSERT_EQ(slot.status, LoadStatus::kReady) << i;
    std::string want = Payload(kBlock, 20 + static_cast<int>(i));
    EXPECT_EQ(std::memcmp(tiered_.region.data() + slot.offset, want.data(), kBlock), 0) << i;
  }
  EXPECT_TRUE(store_->l1().ReleaseLoad(kClient, loaded->load).ok());
}

TEST_F(BlockStoreTest, ABlockNoTierHasIsMissingNotAnError) {
  std::vector<std::string> keys = Keys(2);
  StoreAll(keys, 30);
  ASSERT_EQ(tiered_.l1->Clear(ns_), 2u);
  ASSERT_TRUE(lower_->Remove(TierNamespace{namespaces_.Find(ns_)->fingerprint, {}, 0, ns_}, "k1"));
  auto loaded = store_->AcquireLoad(kClient, ns_, Views(keys), std::nullopt);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->slots[0].status, LoadStatus::kReady);
  EXPECT_EQ(loaded->slots[1].status, LoadStatus::kMissing);
  EXPECT_TRUE(store_->l1().ReleaseLoad(kClient, loaded->load).ok());
}

TEST_F(BlockStoreTest, PeekNamesTheFastestTierOfEachKey) {
  std::vector<std::string> keys = Keys(3);
  StoreAll(keys, 40);
  std::string_view first = keys[0];
  ASSERT_TRUE(tiered_.l1->Evict(ns_, absl::MakeConstSpan(&first, 1)).ok());
  std::vector<std::string> asked = {"k0", "k1", "absent"};
  auto where = store_->Peek(ns_, Views(asked));
  ASSERT_TRUE(where.ok()) << where.status();
  EXPECT_EQ((*where)[0], Tier::kL2);
  EXPECT_EQ((*where)[1], Tier::kL1);
  EXPECT_EQ((*where)[2], std::nullopt);
}

TEST_F(BlockStoreTest, EvictLeavesPinnedKeysInEveryTier) {
  std::vector<std::string> keys = Keys(3);
  StoreAll(keys, 50);
  std::string_view pinned = keys[0];
  ASSERT_EQ(*store_->l1().Pin(ns_, absl::MakeConstSpan(&pinned, 1)), 1u);
  auto evicted = store_->Evict(ns_, Views(keys), TierSelection{});
  ASSERT_TRUE(evicted.ok()) << evicted.status();
  EXPECT_EQ(evicted->pinned, 1u);
  EXPECT_EQ(evicted->l1, 2u);
  EXPECT_EQ(evicted->files[TierIndex(Tier::kL2)], 2u);
  EXPECT_EQ(evicted->keys, 2u);
  auto where = store_->Peek(ns_, Views(keys));
  ASSERT_TRUE(where.ok());
  EXPECT_EQ((*where)[0], Tier::kL1);
  EXPECT_EQ((*where)[1], std::nullopt);
  EXPECT_EQ((*where)[2], std::nullopt);
  EXPECT_EQ(lower_->Stats().blocks, 1u);  // The pinned key's L2 copy stays.
}

TEST_F(BlockStoreTest, EvictAndClearActOnTheSelectedTiersOnly) {
  std::vector<std::string> keys = Keys(2);
  StoreAll(keys, 60);
  auto l1_only = store_->Evict(ns_, Views(keys), TierSelection{true, false, std::nullopt});
  ASSERT_TRUE(l1_only.ok()) << l1_only.status();
  EXPECT_EQ(l1_only->l1, 2u);
  EXPECT_EQ(lower_->Stats().blocks, 2u);
  EXPECT_EQ(store_->Clear(ns_, TierSelection{false, true, Tier::kL2}),
            (std::pair<size_t, size_t>{0, 2}));
  EXPECT_EQ(lower_->Stats().blocks, 0u);
}

TEST_F(BlockStoreTest, DrainWritesWhatTheLowerTierLacks) {
  std::vector<std::string> keys = Keys(3);
  StoreAll(keys, 70);
  ASSERT_EQ(store_->Clear(ns_, TierSelection{false, true, std::nullopt}).second, 3u);
  auto written = store_->Drain(std::nullopt, [](uint64_t, uint64_t) {});
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(*written, 3u);
  EXPECT_EQ(lower_->Stats().blocks, 3u);
}

TEST(BlockStoreWithoutLowerTiersTest, IsL1Alone) {
  std::vector<char> region(8 * (64 << 10));
  auto allocator = *SlabAllocator::Create(
      {.region_bytes = region.size(), .slab_bytes = 64 << 10, .slot_alignment = 4096});
  auto cache = *BlockCache::Create(allocator.get(), BlockCacheOptions{});
  PartitionedCache l1({{cache.get(), 0, region.size()}});
  BlockStore store(&l1, nullptr, BlockStoreOptions{});
  EXPECT_FALSE(store.promotes());
  std::string_view key = "nothing";
  auto found = store.Lookup(kClient, 1, absl::MakeConstSpan(&key, 1), std::nullopt);
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found->hits, 0u);
  EXPECT_TRUE(absl::IsFailedPrecondition(store.Drain(std::nullopt, nullptr).status()));
}

}  // namespace
}  // namespace kvstrata
