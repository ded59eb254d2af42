// BlockCache: leases, loads, sessions and expiry (with the fake clock).
#include "tests/unit/cache/cache_fixture.h"

namespace kvstrata {
namespace {

using CacheLifetimeTest = CacheTest;

TEST_F(CacheLifetimeTest, LeasedBlocksSurvivePressureUntilTheLeaseExpires) {
  auto full = Names(0, 8);  // the pool holds exactly 8 blocks
  Store(full);
  auto views = Views(full);
  LookupResult r = *cache_->Lookup(1, kNs, views, absl::Seconds(5));
  ASSERT_TRUE(r.lease.has_value());
  EXPECT_EQ(Store({"new"})[0], StoreStatus::kDropped);
  EXPECT_EQ(cache_->Stats().dropped_stores, 1u);
  clock_.Advance(absl::Seconds(4));
  EXPECT_EQ(cache_->ReapExpired().leases, 0u);
  clock_.Advance(absl::Seconds(1));
  EXPECT_EQ(cache_->ReapExpired().leases, 1u);
  EXPECT_EQ(Store({"new"})[0], StoreStatus::kReserved);
  EXPECT_EQ(cache_->Stats().evictions, 1u);
  EXPECT_EQ(cache_->AcquireLoad(1, kNs, views, *r.lease).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(CacheLifetimeTest, LoadConsumesTheLeaseAndPinsUntilReleased) {
  Store(Names(0, 8));
  std::vector<std::string> two = {"k0", "k1", "missing"};
  auto views = Views(two);
  LookupResult r = *cache_->Lookup(1, kNs, views, absl::Seconds(5));
  EXPECT_EQ(r.hits, 2u);
  EXPECT_EQ(cache_->AcquireLoad(2, kNs, views, *r.lease).status().code(),
            absl::StatusCode::kFailedPrecondition);  // not session 2's lease
  LoadResult load = *cache_->AcquireLoad(1, kNs, views, *r.lease);
  EXPECT_EQ(load.slots[0].status, LoadStatus::kReady);
  EXPECT_EQ(load.slots[2].status, LoadStatus::kMissing);
  EXPECT_EQ(cache_->Stats().active_leases, 0u);
  EXPECT_EQ(cache_->AcquireLoad(1, kNs, views, *r.lease).status().code(),
            absl::StatusCode::kNotFound);  // consumed
  std::vector<std::string_view> k0 = {"k0"};
  EXPECT_EQ(*cache_->Evict(kNs, k0), 0u);  // pinned by the load
  EXPECT_TRUE(cache_->ReleaseLoad(1, load.load).ok());
  EXPECT_EQ(*cache_->Evict(kNs, k0), 1u);
}

TEST_F(CacheLifetimeTest, ReleasedLeaseUnpins) {
  Store({"a"});
  std::vector<std::string_view> a = {"a"};
  LookupResult r = *cache_->Lookup(1, kNs, a, absl::Seconds(5));
  EXPECT_EQ(*cache_->Evict(kNs, a), 0u);
  EXPECT_TRUE(cache_->ReleaseLease(1, *r.lease).ok());
  EXPECT_EQ(*cache_->Evict(kNs, a), 1u);
}

TEST_F(CacheLifetimeTest, EndSessionFreesEverything) {
  Store({"a", "b"}, 7);
  std::vector<std::string_view> ab = {"a", "b"};
  ASSERT_TRUE(cache_->Lookup(7, kNs, ab, absl::Seconds(30))->lease.has_value());
  ASSERT_NE(cache_->AcquireLoad(7, kNs, ab, std::nullopt)->load, 0u);
  auto pending = Names(0, 4);
  auto views = Views(pending);
  ReserveResult r = *cache_->ReserveStore(7, kNs, kBlock, views);
  EXPECT_EQ(cache_->Stats().used_bytes, 6 * kBlock);
  SessionEndResult end = cache_->EndSession(7);
  EXPECT_EQ(end.leases, 1u);
  EXPECT_EQ(end.loads, 1u);
  EXPECT_EQ(end.reservations, 1u);
  CacheStats st = cache_->Stats();
  EXPECT_EQ(st.used_bytes, 2 * kBlock);  // only the committed blocks remain
  EXPECT_EQ(st.active_leases + st.active_loads + st.active_reservations, 0u);
  EXPECT_EQ(Hits(pending), 0u);
  EXPECT_EQ(cache_->CommitStore(7, r.reservation, std::nullopt).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(cache_->Clear(std::nullopt), 2u);  // nothing is pinned any more
  EXPECT_EQ(cache_->Stats().used_bytes, 0u);
  EXPECT_EQ(allocator_->Stats().used_bytes, 0u);  // the pool is whole again
}

TEST_F(CacheLifetimeTest, AbandonedReservationIsReapedAfterTtl) {
  BlockCacheOptions o = Opts();
  o.reservation_ttl = absl::Seconds(10);
  Build(2, o);
  auto names = Names(0, 3);
  auto views = Views(names);
  ReserveResult r = *cache_->ReserveStore(1, kNs, kBlock, views);
  clock_.Advance(absl::Seconds(9));
  EXPECT_EQ(cache_->ReapExpired().reservations, 0u);
  clock_.Advance(absl::Seconds(1));
  EXPECT_EQ(cache_->ReapExpired().reservations, 1u);
  EXPECT_EQ(allocator_->Stats().used_bytes, 0u);
  EXPECT_EQ(cache_->CommitStore(1, r.reservation, std::nullopt).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(Store(names)[0], StoreStatus::kReserved);
}

TEST_F(CacheLifetimeTest, DestroyingTheCacheReturnsEverySlot) {
  Store({"a", "b"});
  std::vector<std::string_view> c = {"c"};
  ASSERT_TRUE(cache_->ReserveStore(1, kNs, kBlock, c).ok());
  cache_.reset();
  EXPECT_EQ(allocator_->Stats().used_bytes, 0u);
}

}  // namespace
}  // namespace kvstrata
