// BlockCache: store/commit visibility, prefix lookups, loads, and every bad-input class.
#include "tests/unit/cache/cache_fixture.h"

namespace kvstrata {
namespace {

using CacheStoreTest = CacheTest;

TEST_F(CacheStoreTest, ReservedBlockIsInvisibleUntilCommit) {
  auto names = Names(0, 2);
  auto views = Views(names);
  ReserveResult r = *cache_->ReserveStore(1, kNs, kBlock, views);
  ASSERT_NE(r.reservation, 0u);
  ASSERT_EQ(r.slots[0].status, StoreStatus::kReserved);
  EXPECT_EQ(r.slots[0].length, kBlock);
  EXPECT_NE(r.slots[0].offset, r.slots[1].offset);
  EXPECT_EQ(Hits(names), 0u);
  EXPECT_EQ(cache_->AcquireLoad(1, kNs, views, std::nullopt)->load, 0u);
  EXPECT_EQ(*cache_->CommitStore(1, r.reservation, std::nullopt), 2u);
  EXPECT_EQ(Hits(names), 2u);
  EXPECT_EQ(listener_.stored().size(), 2u);
  LoadResult load = *cache_->AcquireLoad(1, kNs, views, std::nullopt);
  EXPECT_EQ(load.slots[1].status, LoadStatus::kReady);
  EXPECT_EQ(load.slots[1].offset, r.slots[1].offset);
  EXPECT_EQ(load.slots[1].length, kBlock);
  EXPECT_TRUE(cache_->ReleaseLoad(1, load.load).ok());
}

// Slots are taken in the order asked for (the engine's block ids, ascending), and the
// blocks are still published in key order.
TEST_F(CacheStoreTest, SlotsFollowTheSlotOrderAndPublishingTheKeyOrder) {
  auto names = Names(0, 4);
  auto views = Views(names);
  const std::vector<uint32_t> order = {3, 1, 2, 0};
  ReserveResult r = *cache_->ReserveStore(1, kNs, kBlock, views, false, order);
  for (size_t k = 1; k < order.size(); ++k) {
    EXPECT_LT(r.slots[order[k - 1]].offset, r.slots[order[k]].offset) << k;
  }
  EXPECT_EQ(*cache_->CommitStore(1, r.reservation, std::nullopt), 4u);
  ASSERT_EQ(listener_.stored().size(), 4u);
  for (size_t i = 0; i < names.size(); ++i) EXPECT_EQ(listener_.stored()[i], names[i]) << i;
}

TEST_F(CacheStoreTest, ASlotOrderThatIsNoPermutationIsRefused) {
  auto names = Names(0, 3);
  auto views = Views(names);
  for (std::vector<uint32_t> order : {std::vector<uint32_t>{0, 1}, {0, 1, 1}, {0, 1, 3}}) {
    auto r = cache_->ReserveStore(1, kNs, kBlock, views, false, order);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << order.size();
  }
  EXPECT_EQ(Hits(names), 0u);
}

TEST_F(CacheStoreTest, LookupCountsLeadingHitsOnly) {
  Store({"a", "b", "d"});
  std::vector<std::string> chain = {"a", "b", "c", "d"};
  auto views = Views(chain);
  LookupResult r = *cache_->Lookup(1, kNs, views, std::nullopt);
  EXPECT_EQ(r.hits, 2u);
  EXPECT_EQ(r.tiers, (std::vector<Tier>{Tier::kL1, Tier::kL1}));
  EXPECT_FALSE(r.lease.has_value());
  EXPECT_EQ(Hits({"a", "b"}, kNs + 1), 0u);  // namespaces are apart
  CacheStats st = cache_->Stats();
  EXPECT_EQ(st.hits, 2u);
  EXPECT_EQ(st.misses, 4u);
}

TEST_F(CacheStoreTest, LookupAnswersL1PastTheFirstMissInTheSameCall) {
  Store({"a", "b", "d", "f"});
  std::vector<std::string> chain = {"a", "b", "c", "d", "e", "f"};
  auto views = Views(chain);
  EXPECT_TRUE(cache_->Lookup(1, kNs, views, std::nullopt)->in_l1_past_miss.empty());
  for (std::optional<absl::Duration> lease :
       {std::optional<absl::Duration>(), std::optional<absl::Duration>(absl::Seconds(5))}) {
    LookupResult r = *cache_->Lookup(1, kNs, views, lease, /*past_miss=*/true);
    EXPECT_EQ(r.hits, 2u);
    EXPECT_EQ(r.in_l1_past_miss, (std::vector<bool>{false, true, false, true}));
    EXPECT_EQ(r.lease.has_value(), lease.has_value());
  }
  LookupResult all = *cache_->Lookup(1, kNs, Views({"a", "b"}), std::nullopt, true);
  EXPECT_TRUE(all.in_l1_past_miss.empty());
}

TEST_F(CacheStoreTest, DuplicatesAreCheapNoOps) {
  Store({"a"});
  EXPECT_EQ(Store({"a", "b", "b"}),
            (std::vector<StoreStatus>{StoreStatus::kAlreadyPresent, StoreStatus::kReserved,
                                      StoreStatus::kAlreadyPresent}));
  // A key being stored by another session is also "already present".
  std::vector<std::string> c = {"c"};
  auto views = Views(c);
  ASSERT_EQ(cache_->ReserveStore(2, kNs, kBlock, views)->slots[0].status, StoreStatus::kReserved);
  EXPECT_EQ(cache_->ReserveStore(3, kNs, kBlock, views)->slots[0].status,
            StoreStatus::kAlreadyPresent);
  EXPECT_EQ(cache_->Stats().blocks, 2u);
}

TEST_F(CacheStoreTest, CommitOfASubsetFreesTheRest) {
  auto names = Names(0, 3);
  auto views = Views(names);
  ReserveResult r = *cache_->ReserveStore(1, kNs, kBlock, views);
  std::vector<uint32_t> written = {0, 2};
  EXPECT_EQ(*cache_->CommitStore(1, r.reservation, absl::MakeConstSpan(written)), 2u);
  EXPECT_EQ(Hits({"k0"}), 1u);
  EXPECT_EQ(Hits({"k1"}), 0u);
  EXPECT_EQ(Hits({"k2"}), 1u);
  EXPECT_EQ(cache_->Stats().used_bytes, 2 * kBlock);
  EXPECT_EQ(Store({"k1"})[0], StoreStatus::kReserved);  // not stuck as pending
}

TEST_F(CacheStoreTest, AbortedReservationNeverBecomesVisible) {
  auto names = Names(0, 2);
  auto views = Views(names);
  ReserveResult r = *cache_->ReserveStore(1, kNs, kBlock, views);
  EXPECT_TRUE(cache_->AbortStore(1, r.reservation).ok());
  EXPECT_EQ(Hits(names), 0u);
  EXPECT_EQ(cache_->Stats().used_bytes, 0u);
  EXPECT_EQ(cache_->AbortStore(1, r.reservation).code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(CacheStoreTest, ReservationErrors) {
  auto names = Names(0, 2);
  auto views = Views(names);
  ReserveResult r = *cache_->ReserveStore(1, kNs, kBlock, views);
  EXPECT_EQ(cache_->CommitStore(2, r.reservation, std::nullopt).status().code(),
            absl::StatusCode::kFailedPrecondition);  // another session's
  EXPECT_EQ(cache_->CommitStore(1, 999, std::nullopt).status().code(), absl::StatusCode::kNotFound);
  std::vector<uint32_t> bad = {5};
  EXPECT_EQ(cache_->CommitStore(1, r.reservation, absl::MakeConstSpan(bad)).status().code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(cache_->CommitStore(1, r.reservation, std::nullopt).ok());
  EXPECT_EQ(cache_->CommitStore(1, r.reservation, std::nullopt).status().code(),
            absl::StatusCode::kFailedPrecondition);  // double commit
}

TEST_F(CacheStoreTest, BadKeysAreInvalidArgument) {
  std::string long_key(33, 'x');
  for (std::vector<std::string_view> keys :
       {std::vector<std::string_view>{""}, std::vector<std::string_view>{"ok", long_key}}) {
    EXPECT_EQ(cache_->Lookup(1, kNs, keys, std::nullopt).status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(cache_->ReserveStore(1, kNs, kBlock, keys).status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(cache_->AcquireLoad(1, kNs, keys, std::nullopt).status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(cache_->Evict(kNs, keys).status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(cache_->Pin(kNs, keys).status().code(), absl::StatusCode::kInvalidArgument);
  }
  std::vector<std::string_view> one = {"a"};
  EXPECT_EQ(cache_->Lookup(1, kNs, one, absl::ZeroDuration()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cache_->Lookup(1, kNs, one, absl::Hours(10)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(CacheStoreTest, BadBlockSizes) {
  std::vector<std::string_view> one = {"a"};
  EXPECT_EQ(cache_->ReserveStore(1, kNs, 0, one).status().code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(cache_->ReserveStore(1, kNs, kBlock, one).ok());
  EXPECT_EQ(cache_->ReserveStore(1, kNs, kBlock / 2, one).status().code(),
            absl::StatusCode::kInvalidArgument);  // the namespace uses kBlock
  EXPECT_EQ(cache_->ReserveStore(1, kNs + 1, kSlab + 1, one).status().code(),
            absl::StatusCode::kResourceExhausted);  // larger than a slab
  auto many = Names(0, 9);                          // 9 x 16 KiB > 128 KiB pool
  auto views = Views(many);
  EXPECT_EQ(cache_->ReserveStore(1, kNs, kBlock, views).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST_F(CacheStoreTest, UnknownIdsAreNotFoundAndForeignIdsRefused) {
  EXPECT_EQ(cache_->ReleaseLoad(1, 12345).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(cache_->ReleaseLease(1, 12345).code(), absl::StatusCode::kNotFound);
  std::vector<std::string_view> one = {"a"};
  EXPECT_EQ(cache_->AcquireLoad(1, kNs, one, LeaseId{777}).status().code(),
            absl::StatusCode::kNotFound);
  Store({"a"});
  LoadResult load = *cache_->AcquireLoad(1, kNs, one, std::nullopt);
  EXPECT_EQ(cache_->ReleaseLoad(2, load.load).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(cache_->ReleaseLoad(1, load.load).ok());
  EXPECT_EQ(cache_->ReleaseLoad(1, load.load).code(), absl::StatusCode::kNotFound);
}

TEST_F(CacheStoreTest, AdminEvictClearAndPerNamespaceStats) {
  Store({"a", "b"});
  Store({"a", "c"}, 1, kNs + 1);
  CacheStats st = cache_->Stats();
  EXPECT_EQ(st.blocks, 4u);
  EXPECT_EQ(st.blocks_per_namespace[kNs], 2u);
  EXPECT_EQ(st.blocks_per_namespace[kNs + 1], 2u);
  std::vector<std::string_view> a = {"a", "zz"};
  EXPECT_EQ(*cache_->Evict(kNs, a), 1u);
  EXPECT_EQ(Hits({"a"}), 0u);
  EXPECT_EQ(Hits({"a"}, kNs + 1), 1u);
  EXPECT_EQ(cache_->Clear(kNs + 1), 2u);
  EXPECT_EQ(cache_->Stats().blocks_per_namespace.count(kNs + 1), 0u);
  EXPECT_EQ(cache_->Clear(std::nullopt), 1u);
  EXPECT_EQ(cache_->Stats().used_bytes, 0u);
  EXPECT_EQ(listener_.removed().size(), 4u);
  EXPECT_EQ(listener_.causes()[0], RemovalCause::kAdminEvict);
}

}  // namespace
}  // namespace kvstrata
