// BlockCache: slots that an ended (or expired) session's process may still touch are never
// handed to anyone else until ReleaseFenced (the paused-writer case of docs/shared-memory.md).
#include <set>

#include "tests/unit/cache/cache_fixture.h"

namespace kvstrata {
namespace {

class CacheFenceTest : public CacheTest {
 protected:
  static constexpr SessionId kPaused = 7;
  void SetUp() override {
    BlockCacheOptions o = Opts();
    o.reservation_ttl = absl::Seconds(10);
    o.may_write = [this](SessionId s) { return running_.count(s) > 0; };
    Build(2, o);  // 8 slots
  }
  // Offsets of every slot that `session` reserves for `names` (all reserved).
  std::set<uint64_t> Reserve(const std::vector<std::string>& names, SessionId session,
                             ReservationId* id = nullptr) {
    auto views = Views(names);
    ReserveResult r = *cache_->ReserveStore(session, kNs, kBlock, views);
    std::set<uint64_t> offsets;
    for (const StoreSlot& s : r.slots) {
      EXPECT_EQ(s.status, StoreStatus::kReserved);
      offsets.insert(s.offset);
    }
    if (id != nullptr) *id = r.reservation;
    return offsets;
  }
  // Fills the rest of the pool from another session; returns the slots it was given.
  std::set<uint64_t> FillFromAnotherSession(int count) {
    std::set<uint64_t> offsets;
    for (int i = 0; i < count; ++i) {
      std::vector<std::string> one = {"other" + std::to_string(i)};
      auto views = Views(one);
      ReserveResult r = *cache_->ReserveStore(2, kNs, kBlock, views);
      if (r.slots[0].status != StoreStatus::kReserved) break;
      offsets.insert(r.slots[0].offset);
      EXPECT_TRUE(cache_->CommitStore(2, r.reservation, std::nullopt).ok());
    }
    return offsets;
  }
  std::set<SessionId> running_;
};

bool Disjoint(const std::set<uint64_t>& a, const std::set<uint64_t>& b) {
  for (uint64_t x : a) {
    if (b.count(x)) return false;
  }
  return true;
}

TEST_F(CacheFenceTest, EndedSessionsSlotsAreNotReusedWhileItsProcessRuns) {
  running_.insert(kPaused);
  std::set<uint64_t> paused = Reserve(Names(0, 3), kPaused);
  SessionEndResult end = cache_->EndSession(kPaused);
  EXPECT_EQ(end.reservations, 1u);
  EXPECT_EQ(end.fenced_slots, 3u);
  EXPECT_EQ(cache_->Stats().fenced_bytes, 3 * kBlock);
  EXPECT_EQ(Hits(Names(0, 3)), 0u);  // Never visible.
  std::set<uint64_t> others = FillFromAnotherSession(8);
  EXPECT_EQ(others.size(), 5u);  // Only the 5 unfenced slots.
  EXPECT_TRUE(Disjoint(paused, others));
  // The process exits: its slots go back and are used again.
  running_.clear();
  EXPECT_EQ(cache_->ReleaseFenced(kPaused), 3u);
  EXPECT_EQ(cache_->ReleaseFenced(kPaused), 0u);
  EXPECT_EQ(cache_->Stats().fenced_bytes, 0u);
  std::vector<std::string> more = {"late"};
  auto views = Views(more);
  EXPECT_EQ(cache_->ReserveStore(3, kNs, kBlock, views)->slots[0].status, StoreStatus::kReserved);
}

TEST_F(CacheFenceTest, ExpiredReservationOfARunningWriterIsFenced) {
  running_.insert(kPaused);
  ReservationId id = 0;
  std::set<uint64_t> paused = Reserve(Names(0, 2), kPaused, &id);
  clock_.Advance(absl::Seconds(10));
  ReapResult reaped = cache_->ReapExpired();
  EXPECT_EQ(reaped.reservations, 1u);
  EXPECT_EQ(reaped.fenced_slots, 2u);
  EXPECT_EQ(cache_->CommitStore(kPaused, id, std::nullopt).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(Disjoint(paused, FillFromAnotherSession(8)));
  EXPECT_EQ(cache_->ReleaseFenced(kPaused), 2u);
  EXPECT_EQ(allocator_->Stats().used_bytes, 6 * kBlock);
}

TEST_F(CacheFenceTest, EndedReadersBlocksStayPinned) {
  Store({"a", "b"}, 2);
  running_.insert(kPaused);
  std::vector<std::string_view> ab = {"a", "b"};
  ASSERT_NE(cache_->AcquireLoad(kPaused, kNs, ab, std::nullopt)->load, 0u);
  SessionEndResult end = cache_->EndSession(kPaused);
  EXPECT_EQ(end.loads, 1u);
  EXPECT_EQ(end.fenced_slots, 2u);
  EXPECT_EQ(cache_->Stats().active_loads, 0u);
  // Issue 46: the pinned blocks are shown in fenced_bytes (kvstrata_fenced_bytes).
  EXPECT_EQ(cache_->Stats().fenced_bytes, 2 * kBlock);
  EXPECT_EQ(*cache_->Evict(kNs, ab), 0u);  // The reader may still be copying.
  EXPECT_EQ(Hits({"a", "b"}), 2u);         // Still served to others.
  EXPECT_EQ(cache_->ReleaseFenced(kPaused), 2u);
  EXPECT_EQ(cache_->Stats().fenced_bytes, 0u);
  EXPECT_EQ(*cache_->Evict(kNs, ab), 2u);
}

TEST_F(CacheFenceTest, SessionsWhoseProcessIsGoneAreFreedAtOnce) {
  std::set<uint64_t> gone = Reserve(Names(0, 3), kPaused);  // Not running.
  SessionEndResult end = cache_->EndSession(kPaused);
  EXPECT_EQ(end.fenced_slots, 0u);
  EXPECT_EQ(allocator_->Stats().used_bytes, 0u);
  EXPECT_EQ(FillFromAnotherSession(8).size(), 8u);
}

TEST_F(CacheFenceTest, DestroyingTheCacheReturnsFencedSlots) {
  running_.insert(kPaused);
  Reserve(Names(0, 3), kPaused);
  cache_->EndSession(kPaused);
  cache_.reset();
  EXPECT_EQ(allocator_->Stats().used_bytes, 0u);
}

}  // namespace
}  // namespace kvstrata
