// Promoter over a real L1 (BlockCache on a heap region) and the in-memory fake tier: blocks
// come up byte-exact and join the lease they are given, a key in flight is promoted once,
// waits are bounded by promotion_wait, a stopped stack finishes its promotions at once, and
// a load's plan tells what to wait for from what to promote, and a batch spreads over all of
// the tier's I/O threads.
#include "daemon/tiering/promoter.h"

#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/cache/block_cache.h"
#include "daemon/pool/slab_allocator.h"
#include "daemon/testing/memory_tier.h"
#include "gtest/gtest.h"
#include "tests/unit/tiers/tier_test_data.h"

namespace kvstrata {
namespace {

constexpr SessionId kClient = 7;
constexpr uint64_t kBlock = 16 << 10;
constexpr uint64_t kSlab = 64 << 10;
constexpr uint64_t kSlabs = 8;

class PromoterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ns_ = namespaces_.Register(kClient, OpaqueTestSpec(kBlock, "promoter-test"))->id;
    region_.assign(kSlabs * kSlab, '\0');
    allocator_ = *SlabAllocator::Create(
        {.region_bytes = kSlabs * kSlab, .slab_bytes = kSlab, .slot_alignment = 4096});
    BlockCacheOptions options;
    options.high_watermark = 1.0;
    options.low_watermark = 1.0;
    cache_ = *BlockCache::Create(allocator_.get(), options);
    l1_ = std::make_unique<PartitionedCache>(
        std::vector<PartitionedCache::Partition>{{cache_.get(), 0, kSlabs * kSlab}});
    auto tier = std::make_unique<MemoryTier>(Tier::kL2);
    tier_ = tier.get();
    stack_.AddTier(std::move(tier), LowerTierOptions{.io_threads = io_threads_});
    stack_.AttachL1(l1_.get(), region_.data());
    tn_ = *stack_.NamespaceOf(ns_);
  }
  void TearDown() override { stack_.Stop(); }

  // Writes keys[i] into the fake tier with payload seed + i.
  void WriteBelow(const std::vector<std::string>& keys, int seed) {
    for (size_t i = 0; i < keys.size(); ++i) {
      ASSERT_TRUE(tier_->Write(tn_, keys[i], Payload(kBlock, seed + static_cast<int>(i))).ok());
    }
  }
  // Holds the tier's only I/O thread until the returned promise is set.
  std::promise<void> HoldIo() {
    std::promise<void> release;
    auto held = std::make_shared<std::shared_future<void>>(release.get_future().share());
    std::promise<void> running;
    std::future<void> started = running.get_future();
    stack_.tiers()[0]->io->Submit(
        IoPool::Priority::kUrgent,
        [held, running = std::make_shared<std::promise<void>>(std::move(running))] {
          running->set_value();
          held->wait();
        });
    started.wait();
    return release;
  }
  static bool AllDone(const Promoter::Marks& marks) {
    for (const auto& m : marks) {
      if (!m->done) return false;
    }
    return true;
  }
  std::vector<std::optional<Tier>> InL1(const std::vector<std::string_view>& keys) {
    return *l1_->Peek(ns_, keys);
  }

  size_t io_threads_ = 1;  // the fake tier's; set before SetUp
  NamespaceRegistry namespaces_;
  NamespaceId ns_ = 0;
  std::vector<char> region_;
  std::unique_ptr<SlabAllocator> allocator_;
  std::unique_ptr<BlockCache> cache_;
  std::unique_ptr<PartitionedCache> l1_;
  TierStack stack_{&namespaces_, TierTable::Standard()};
  MemoryTier* tier_ = nullptr;
  TierNamespace tn_;
};

TEST_F(PromoterTest, BlocksComeUpByteExactAndJoinTheLease) {
  Promoter promoter(&stack_, absl::Seconds(5));
  std::vector<std::string> keys = {"a", "b", "c"};
  WriteBelow(keys, 40);
  absl::StatusOr<LeaseId> lease = l1_->CreateEmptyLease(kClient, ns_, absl::Seconds(30));
  ASSERT_TRUE(lease.ok());
  Promoter::Marks marks = promoter.Promote(ns_, tn_, keys, {Tier::kL2, Tier::kL2, Tier::kL2},
                                           LeaseRef{kClient, *lease});
  ASSERT_EQ(marks.size(), 3u);
  promoter.Wait(marks);
  EXPECT_TRUE(AllDone(marks));
  std::vector<std::string_view> views(keys.begin(), keys.end());
  // The lease holds them: an admin evict of the keys leaves them in L1.
  std::vector<bool> evicted(keys.size(), false);
  ASSERT_TRUE(l1_->Evict(ns_, views, &evicted).ok());
  for (const auto& where : InL1(views)) EXPECT_EQ(where, Tier::kL1);
  auto loaded = l1_->AcquireLoad(kClient, ns_, views, *lease);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  for (size_t i = 0; i < keys.size(); ++i) {
    const LoadSlot& slot = loaded->slots[i];
    ASSERT_EQ(slot.status, LoadStatus::kReady) << keys[i];
    const std::string want = Payload(kBlock, 40 + static_cast<int>(i));
    EXPECT_EQ(std::memcmp(region_.data() + slot.offset, want.data(), kBlock), 0) << keys[i];
  }
  ASSERT_TRUE(l1_->ReleaseLoad(kClient, loaded->load).ok());
  EXPECT_EQ(stack_.tiers()[0]->promoted.load(), 3u);
}

TEST_F(PromoterTest, AKeyInFlightIsPromotedOnce) {
  Promoter promoter(&stack_, absl::Seconds(5));
  WriteBelow({"a"}, 1);
  std::promise<void> release = HoldIo();
  Promoter::Marks first = promoter.Promote(ns_, tn_, {"a"}, {Tier::kL2}, std::nullopt);
  Promoter::Marks second = promoter.Promote(ns_, tn_, {"a"}, {Tier::kL2}, std::nullopt);
  ASSERT_EQ(first.size(), 1u);
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(first[0], second[0]);  // The same promotion to wait on.
  EXPECT_EQ(stack_.tiers()[0]->promotions.load(), 1u);
  EXPECT_FALSE(first[0]->done);
  release.set_value();
  promoter.Wait(second);
  EXPECT_TRUE(AllDone(second));
  EXPECT_EQ(stack_.tiers()[0]->promoted.load(), 1u);
}

TEST_F(PromoterTest, AWaitEndsAtPromotionWait) {
  Promoter promoter(&stack_, absl::Milliseconds(50));
  WriteBelow({"a"}, 1);
  std::promise<void> release = HoldIo();
  Promoter::Marks marks = promoter.Promote(ns_, tn_, {"a"}, {Tier::kL2}, std::nullopt);
  const absl::Time start = absl::Now();
  promoter.Wait(marks);
  const absl::Duration waited = absl::Now() - start;
  EXPECT_GE(waited, absl::Milliseconds(45));
  EXPECT_LT(waited, absl::Seconds(2));
  EXPECT_FALSE(AllDone(marks));
  release.set_value();
  promoter.Wait(marks);
  EXPECT_TRUE(AllDone(marks));
}

TEST_F(PromoterTest, AfterStopPromotionsEndAtOnceAndNothingStaysInFlight) {
  Promoter promoter(&stack_, absl::Seconds(5));
  WriteBelow({"a"}, 1);
  stack_.Stop();
  Promoter::Marks marks = promoter.Promote(ns_, tn_, {"a"}, {Tier::kL2}, std::nullopt);
  ASSERT_EQ(marks.size(), 1u);
  EXPECT_TRUE(marks[0]->done);
  Promoter::Marks again = promoter.Promote(ns_, tn_, {"a"}, {Tier::kL2}, std::nullopt);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_NE(again[0], marks[0]);  // Not left claimed by the first.
  EXPECT_EQ(stack_.tiers()[0]->promotions.load(), 0u);
}

TEST_F(PromoterTest, ALoadPlanWaitsForFlightsAndPromotesWhatTheTiersHold) {
  Promoter promoter(&stack_, absl::Seconds(5));
  WriteBelow({"flying", "below"}, 1);
  // "in_l1" is stored in L1; "absent" is nowhere.
  std::vector<std::string_view> l1_key = {"in_l1"};
  auto reserved = l1_->ReserveStore(kClient, ns_, kBlock, l1_key);
  ASSERT_TRUE(reserved.ok());
  ASSERT_TRUE(l1_->CommitStore(kClient, reserved->reservation, std::nullopt).ok());
  std::promise<void> release = HoldIo();
  Promoter::Marks flying = promoter.Promote(ns_, tn_, {"flying"}, {Tier::kL2}, std::nullopt);
  std::vector<std::string_view> keys = {"in_l1", "flying", "below", "absent"};
  Promoter::LoadPlan plan = promoter.PlanLoad(ns_, tn_, keys, InL1(keys));
  ASSERT_EQ(plan.in_flight.size(), 1u);
  EXPECT_EQ(plan.in_flight[0], flying[0]);
  EXPECT_EQ(plan.promote, std::vector<std::string>{"below"});
  EXPECT_EQ(plan.tiers, std::vector<Tier>{Tier::kL2});
  release.set_value();
  promoter.Wait(flying);
}

TEST(PromoterSplitTest, BlocksPerTaskSpreadsABatchOverTheThreads) {
  EXPECT_EQ(Promoter::BlocksPerTask(1, 4), 1u);
  EXPECT_EQ(Promoter::BlocksPerTask(3, 4), 1u);   // 3 tasks: 3 reads at once
  EXPECT_EQ(Promoter::BlocksPerTask(16, 4), 4u);  // 4 tasks, one per thread
  EXPECT_EQ(Promoter::BlocksPerTask(17, 4), 5u);
  EXPECT_EQ(Promoter::BlocksPerTask(64, 4), Promoter::kMaxBlocksPerTask);  // 8 tasks of 8
  EXPECT_EQ(Promoter::BlocksPerTask(5, 1), 5u);
  EXPECT_EQ(Promoter::BlocksPerTask(5, 0), 5u);  // no threads counts as one
}

class PromoterFourThreadsTest : public PromoterTest {
 protected:
  PromoterFourThreadsTest() { io_threads_ = 4; }
};

TEST_F(PromoterFourThreadsTest, AShortBatchTakesEveryThread) {
  Promoter promoter(&stack_, absl::Seconds(5));
  std::vector<std::string> keys;
  for (int i = 0; i < 16; ++i) keys.push_back(absl::StrCat("k", i));
  WriteBelow(keys, 60);
  Promoter::Marks marks =
      promoter.Promote(ns_, tn_, keys, std::vector<Tier>(keys.size(), Tier::kL2), std::nullopt);
  promoter.Wait(marks);
  EXPECT_TRUE(AllDone(marks));
  EXPECT_EQ(stack_.tiers()[0]->promotions.load(), 4u);  // was 2 tasks of 8: 2 threads idle
  EXPECT_EQ(stack_.tiers()[0]->promoted.load(), 16u);
  std::vector<std::string_view> views(keys.begin(), keys.end());
  for (const auto& where : InL1(views)) EXPECT_EQ(where, Tier::kL1);
}

}  // namespace
}  // namespace kvstrata
