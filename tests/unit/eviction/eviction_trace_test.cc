// Reference traces: hand-computed small traces and a scan + hot-set mix.
#include <string>

#include "daemon/eviction/eviction_policy.h"
#include "gtest/gtest.h"
#include "tests/unit/eviction/policy_sim.h"

namespace kvstrata {
namespace {

std::unique_ptr<EvictionPolicy> Make(const std::string& name, size_t capacity) {
  return *MakeEvictionPolicy(name, capacity);
}

auto kAll = [](uint64_t) { return true; };

TEST(EvictionFactoryTest, KnowsThreeNames) {
  for (const char* name : {"lru", "arc", "s3fifo"}) {
    absl::StatusOr<std::unique_ptr<EvictionPolicy>> p = MakeEvictionPolicy(name, 10);
    ASSERT_TRUE(p.ok()) << name;
    EXPECT_EQ((*p)->Name(), name);
  }
  EXPECT_EQ(MakeEvictionPolicy("fifo", 10).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(LruTraceTest, HandComputedTrace) {
  // capacity 2: A B A C B A -> miss miss hit miss(evict B) miss(evict A) miss(evict C)
  auto lru = Make("lru", 2);
  EXPECT_EQ(ReplayHits(*lru, {1, 2, 1, 3, 2, 1}, 2), 1u);
}

TEST(LruTraceTest, EvictsLeastRecentlyUsed) {
  auto lru = Make("lru", 3);
  for (uint64_t i : {1, 2, 3}) lru->OnInsert(i);
  lru->OnAccess(1);
  EXPECT_EQ(lru->PickVictim(kAll), 2u);
  EXPECT_EQ(lru->PickVictim(kAll), 3u);
  EXPECT_EQ(lru->PickVictim(kAll), 1u);
}

TEST(ArcTraceTest, EntriesSeenTwiceOutliveEntriesSeenOnce) {
  auto arc = Make("arc", 2);
  arc->OnInsert(1);
  arc->OnInsert(2);
  arc->OnAccess(1);  // 1 -> T2; T1 = {2}, p = 0
  EXPECT_EQ(arc->PickVictim(kAll), 2u);
}

TEST(ArcTraceTest, GhostHitGoesStraightToFrequentList) {
  auto arc = Make("arc", 2);
  arc->OnInsert(1);
  arc->OnInsert(2);
  EXPECT_EQ(arc->PickVictim(kAll), 1u);  // 1 -> ghost B1
  arc->OnInsert(1);                      // ghost hit: 1 -> T2, p grows to 1
  arc->OnInsert(3);                      // T1 = {3, 2}
  EXPECT_EQ(arc->PickVictim(kAll), 2u);  // |T1| = 2 > p = 1: LRU of T1
  EXPECT_EQ(arc->PickVictim(kAll), 1u);  // |T1| = 1 = p: T2 gives way
  EXPECT_EQ(arc->PickVictim(kAll), 3u);
}

TEST(S3FifoTraceTest, AccessedInSmallQueueMovesToMain) {
  auto s3 = Make("s3fifo", 10);  // small queue target: 1
  s3->OnInsert(1);
  s3->OnAccess(1);
  s3->OnInsert(2);
  // LRU would evict 1; S3-FIFO promotes 1 (accessed) and evicts 2 (one-hit).
  EXPECT_EQ(s3->PickVictim(kAll), 2u);
  s3->OnInsert(2);  // ghost hit: straight to main
  s3->OnInsert(3);  // small
  EXPECT_EQ(s3->PickVictim(kAll), 3u);
  EXPECT_TRUE(s3->Contains(1));
  EXPECT_TRUE(s3->Contains(2));
}

// 20 hot keys, seen twice at the start (so every policy knows they are reused), then each
// round followed by a scan of 40 one-time keys; capacity 50. The reuse distance of a hot
// key (60) exceeds the capacity, so LRU never hits after the warm-up; scan-resistant
// policies keep the hot set (upper bound: 20 hits of 60 accesses per round).
std::vector<uint64_t> ScanPlusHotTrace() {
  std::vector<uint64_t> trace;
  for (uint64_t h = 1; h <= 20; ++h) trace.push_back(h);
  uint64_t next_scan = 1000;
  for (int round = 0; round < 200; ++round) {
    for (uint64_t h = 1; h <= 20; ++h) trace.push_back(h);
    for (int s = 0; s < 40; ++s) trace.push_back(next_scan++);
  }
  return trace;
}

TEST(ScanResistanceTest, ArcAndS3FifoBeatLru) {
  std::vector<uint64_t> trace = ScanPlusHotTrace();
  auto ratio = [&](const char* name) {
    auto p = Make(name, 50);
    return static_cast<double>(ReplayHits(*p, trace, 50)) / trace.size();
  };
  double lru = ratio("lru"), arc = ratio("arc"), s3 = ratio("s3fifo");
  std::printf("hit ratio lru=%.3f arc=%.3f s3fifo=%.3f (max 0.333)\n", lru, arc, s3);
  EXPECT_LT(lru, 0.01);
  EXPECT_GT(arc, 0.25);
  EXPECT_GT(s3, 0.30);
}

}  // namespace
}  // namespace kvstrata
