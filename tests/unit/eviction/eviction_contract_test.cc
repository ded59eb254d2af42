// The contract every EvictionPolicy passes (one typed suite, run against each policy).
#include <random>
#include <set>

#include "daemon/eviction/arc_policy.h"
#include "daemon/eviction/lru_policy.h"
#include "daemon/eviction/s3fifo_policy.h"
#include "gtest/gtest.h"

namespace kvstrata {
namespace {

template <typename P>
std::unique_ptr<EvictionPolicy> MakePolicy(size_t capacity) {
  if constexpr (std::is_same_v<P, LruPolicy>) {
    (void)capacity;
    return std::make_unique<LruPolicy>();
  } else {
    return std::make_unique<P>(capacity);
  }
}

template <typename P>
class EvictionContractTest : public ::testing::Test {
 protected:
  std::unique_ptr<EvictionPolicy> policy_ = MakePolicy<P>(100);
};

using Policies = ::testing::Types<LruPolicy, ArcPolicy, S3FifoPolicy>;
TYPED_TEST_SUITE(EvictionContractTest, Policies);

TYPED_TEST(EvictionContractTest, TracksInsertedEntries) {
  for (uint64_t i = 1; i <= 10; ++i) this->policy_->OnInsert(i);
  EXPECT_EQ(this->policy_->Size(), 10u);
  EXPECT_TRUE(this->policy_->Contains(5));
  EXPECT_FALSE(this->policy_->Contains(11));
}

TYPED_TEST(EvictionContractTest, VictimIsAPresentKeyAndLeaves) {
  for (uint64_t i = 1; i <= 10; ++i) this->policy_->OnInsert(i);
  std::set<uint64_t> seen;
  for (int n = 0; n < 10; ++n) {
    std::optional<uint64_t> v = this->policy_->PickVictim([](uint64_t) { return true; });
    ASSERT_TRUE(v.has_value());
    EXPECT_GE(*v, 1u);
    EXPECT_LE(*v, 10u);
    EXPECT_TRUE(seen.insert(*v).second) << "victim " << *v << " returned twice";
    EXPECT_FALSE(this->policy_->Contains(*v));
  }
  EXPECT_EQ(this->policy_->Size(), 0u);
  EXPECT_FALSE(this->policy_->PickVictim([](uint64_t) { return true; }).has_value());
}

TYPED_TEST(EvictionContractTest, NeverEvictsPinned) {
  for (uint64_t i = 1; i <= 20; ++i) this->policy_->OnInsert(i);
  for (uint64_t i = 1; i <= 20; i += 3) this->policy_->OnAccess(i);
  auto unpinned = [](uint64_t id) { return id % 2 == 0; };
  for (int n = 0; n < 10; ++n) {
    std::optional<uint64_t> v = this->policy_->PickVictim(unpinned);
    ASSERT_TRUE(v.has_value());
    EXPECT_EQ(*v % 2, 0u) << "evicted pinned " << *v;
  }
  EXPECT_FALSE(this->policy_->PickVictim(unpinned).has_value());
  EXPECT_EQ(this->policy_->Size(), 10u);
  for (uint64_t i = 1; i <= 20; i += 2) EXPECT_TRUE(this->policy_->Contains(i));
}

TYPED_TEST(EvictionContractTest, EraseStopsTracking) {
  for (uint64_t i = 1; i <= 5; ++i) this->policy_->OnInsert(i);
  this->policy_->OnAccess(3);
  this->policy_->OnErase(3);
  this->policy_->OnErase(42);   // unknown: ignored
  this->policy_->OnAccess(42);  // unknown: ignored
  EXPECT_FALSE(this->policy_->Contains(3));
  EXPECT_EQ(this->policy_->Size(), 4u);
  while (auto v = this->policy_->PickVictim([](uint64_t) { return true; })) {
    EXPECT_NE(*v, 3u);
  }
  this->policy_->OnInsert(3);  // may come back
  EXPECT_TRUE(this->policy_->Contains(3));
}

TYPED_TEST(EvictionContractTest, StaysWithinCapacityOnARandomTrace) {
  constexpr size_t kCapacity = 50;
  this->policy_->SetCapacity(kCapacity);
  std::mt19937_64 rng(42);
  std::uniform_int_distribution<uint64_t> dist(1, 400);
  for (int n = 0; n < 20000; ++n) {
    uint64_t id = dist(rng);
    if (this->policy_->Contains(id)) {
      this->policy_->OnAccess(id);
      continue;
    }
    if (this->policy_->Size() >= kCapacity) {
      std::optional<uint64_t> v = this->policy_->PickVictim([](uint64_t x) { return x % 50 != 0; });
      ASSERT_TRUE(v.has_value());
      ASSERT_NE(*v % 50, 0u);
    }
    this->policy_->OnInsert(id);
    ASSERT_LE(this->policy_->Size(), kCapacity);
  }
}

}  // namespace
}  // namespace kvstrata
