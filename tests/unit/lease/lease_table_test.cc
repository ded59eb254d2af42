#include "daemon/lease/lease_table.h"

#include <thread>

#include "daemon/testing/fake_clock.h"
#include "gtest/gtest.h"

namespace kvstrata {
namespace {

std::vector<BlockKey> Keys(int n) {
  std::vector<BlockKey> keys;
  for (int i = 0; i < n; ++i) keys.push_back(*BlockKey::Make(1, std::string(1, 'a' + i)));
  return keys;
}

class LeaseTableTest : public ::testing::Test {
 protected:
  FakeClock clock_;
  LeaseTable table_{&clock_};
};

TEST_F(LeaseTableTest, ConsumeReturnsTheKeysOnce) {
  LeaseId id = table_.Create(7, Keys(3), absl::Seconds(5));
  absl::StatusOr<Lease> lease = table_.Consume(7, id);
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ(lease->keys.size(), 3u);
  EXPECT_EQ(table_.Consume(7, id).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(LeaseTableTest, AnotherSessionCannotConsume) {
  LeaseId id = table_.Create(7, Keys(1), absl::Seconds(5));
  EXPECT_EQ(table_.Consume(8, id).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(table_.Release(7, id).ok());
}

TEST_F(LeaseTableTest, TransferHandsALiveLeaseToAnotherSession) {
  LeaseId id = table_.Create(7, Keys(2), absl::Seconds(5));
  EXPECT_EQ(*table_.Owner(id), 7u);
  EXPECT_EQ(table_.Transfer(id, 8, 9).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(table_.Transfer(id, 7, 9).ok());
  EXPECT_EQ(*table_.Owner(id), 9u);
  EXPECT_EQ(table_.Consume(7, id).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(table_.DropSession(7).empty());  // It went with the lease.
  absl::StatusOr<Lease> lease = table_.Consume(9, id);
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ(lease->keys.size(), 2u);
  EXPECT_EQ(table_.Owner(id).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(table_.Transfer(id, 9, 7).code(), absl::StatusCode::kNotFound);
}

TEST_F(LeaseTableTest, ExpiresAfterTtl) {
  table_.Create(1, Keys(1), absl::Seconds(5));
  LeaseId later = table_.Create(1, Keys(2), absl::Seconds(10));
  clock_.Advance(absl::Seconds(4));
  EXPECT_TRUE(table_.ReapExpired().empty());
  clock_.Advance(absl::Seconds(1));
  std::vector<Lease> reaped = table_.ReapExpired();
  ASSERT_EQ(reaped.size(), 1u);
  EXPECT_EQ(reaped[0].keys.size(), 1u);
  EXPECT_EQ(table_.Size(), 1u);
  clock_.Advance(absl::Seconds(5));
  ASSERT_EQ(table_.ReapExpired().size(), 1u);
  EXPECT_EQ(table_.Consume(1, later).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(LeaseTableTest, DropSessionEndsOnlyThatSession) {
  table_.Create(1, Keys(1), absl::Seconds(5));
  table_.Create(1, Keys(1), absl::Seconds(5));
  LeaseId other = table_.Create(2, Keys(1), absl::Seconds(5));
  EXPECT_EQ(table_.DropSession(1).size(), 2u);
  EXPECT_EQ(table_.Size(), 1u);
  EXPECT_TRUE(table_.Consume(2, other).ok());
}

TEST_F(LeaseTableTest, ReaperThreadRacesWithUsers) {
  std::atomic<bool> stop{false};
  std::atomic<size_t> reaped{0};
  std::thread reaper([&] {
    while (!stop.load()) reaped += table_.ReapExpired().size();
  });
  size_t consumed = 0;
  for (int i = 0; i < 2000; ++i) {
    LeaseId id = table_.Create(1, Keys(1), absl::Milliseconds(1));
    clock_.Advance(absl::Milliseconds(1));
    if (table_.Consume(1, id).ok()) ++consumed;
  }
  stop = true;
  reaper.join();
  reaped += table_.ReapExpired().size();
  EXPECT_EQ(consumed + reaped.load(), 2000u);
}

}  // namespace
}  // namespace kvstrata
