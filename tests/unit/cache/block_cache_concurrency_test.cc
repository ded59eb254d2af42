// BlockCache under concurrent sessions: stores, leased lookups, loads, admin evictions
// and a reaper thread (meaningful under TSan). Afterwards the pool must be whole again.
#include <atomic>
#include <random>
#include <thread>

#include "tests/unit/cache/cache_fixture.h"

namespace kvstrata {
namespace {

using CacheConcurrencyTest = CacheTest;

void Worker(BlockCache& cache, SessionId session, int rounds) {
  std::mt19937 rng(static_cast<unsigned>(session));
  std::uniform_int_distribution<int> key(0, 40);
  for (int round = 0; round < rounds; ++round) {
    std::vector<std::string> names;
    for (int i = 0; i < 4; ++i) names.push_back("k" + std::to_string(key(rng)));
    std::vector<std::string_view> views(names.begin(), names.end());
    auto r = cache.ReserveStore(session, CacheTest::kNs, CacheTest::kBlock, views);
    ASSERT_TRUE(r.ok());
    if (r->reservation != 0 && round % 5 != 0) {
      // The reaper's clock runs fast: a reservation may expire before its commit.
      absl::Status commit = cache.CommitStore(session, r->reservation, std::nullopt).status();
      ASSERT_TRUE(commit.ok() || absl::IsNotFound(commit)) << commit;
    }
    auto lookup = cache.Lookup(session, CacheTest::kNs, views, absl::Seconds(1));
    ASSERT_TRUE(lookup.ok());
    auto load = cache.AcquireLoad(session, CacheTest::kNs, views, lookup->lease);
    ASSERT_TRUE(load.ok() || absl::IsNotFound(load.status())) << load.status();  // Expired lease.
    if (!load.ok()) continue;
    if (load->load != 0 && round % 3 != 0) {
      ASSERT_TRUE(cache.ReleaseLoad(session, load->load).ok());
    }
    if (round % 7 == 0) {
      ASSERT_TRUE(cache.Evict(CacheTest::kNs, views).ok());
    }
  }
  cache.EndSession(session);
}

TEST_F(CacheConcurrencyTest, SessionsRaceAndLeaveNothingBehind) {
  Build(4);  // 16 blocks for 41 keys: constant eviction
  std::atomic<bool> stop{false};
  std::thread reaper([&] {
    while (!stop.load()) {
      clock_.Advance(absl::Milliseconds(100));
      cache_->ReapExpired();
      cache_->Stats();
    }
  });
  std::vector<std::thread> workers;
  for (SessionId s = 1; s <= 4; ++s) workers.emplace_back(Worker, std::ref(*cache_), s, 300);
  for (std::thread& t : workers) t.join();
  stop = true;
  reaper.join();
  CacheStats st = cache_->Stats();
  EXPECT_EQ(st.active_leases + st.active_loads + st.active_reservations, 0u);
  EXPECT_EQ(st.used_bytes, st.blocks * kBlock);
  EXPECT_EQ(cache_->Clear(std::nullopt), st.blocks);
  EXPECT_EQ(allocator_->Stats().used_bytes, 0u);
}

}  // namespace
}  // namespace kvstrata
