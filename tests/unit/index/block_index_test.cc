#include "daemon/index/block_index.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace kvstrata {
namespace {

BlockKey Key(int i, NamespaceId ns = 1) { return *BlockKey::Make(ns, "key-" + std::to_string(i)); }

BlockEntry L1Entry(uint64_t offset) {
  BlockEntry e;
  e.offset = offset;
  e.tiers = TierBit(Tier::kL1);
  return e;
}

TEST(BlockIndexTest, InsertFindErase) {
  BlockIndex index(4);
  EXPECT_TRUE(index.Insert(Key(1), L1Entry(4096)));
  EXPECT_FALSE(index.Insert(Key(1), L1Entry(8192)));
  ASSERT_TRUE(index.Find(Key(1)).has_value());
  EXPECT_EQ(index.Find(Key(1))->offset, 4096u);
  EXPECT_FALSE(index.Find(Key(1, 2)).has_value());
  EXPECT_EQ(index.Size(), 1u);
  EXPECT_EQ(index.Erase(Key(1))->offset, 4096u);
  EXPECT_FALSE(index.Erase(Key(1)).has_value());
  EXPECT_EQ(index.Size(), 0u);
}

TEST(BlockIndexTest, UpdateRunsUnderTheLock) {
  BlockIndex index;
  index.Insert(Key(1), L1Entry(0));
  EXPECT_TRUE(index.Update(Key(1), [](BlockEntry& e) { e.refs = 3; }));
  EXPECT_FALSE(index.Update(Key(2), [](BlockEntry& e) { e.refs = 3; }));
  EXPECT_EQ(index.Find(Key(1))->refs, 3u);
}

TEST(BlockIndexTest, UpdateEachVisitsEveryPresentKeyOnceAcrossChunksAndShards) {
  BlockIndex index(8);
  std::vector<BlockKey> keys;
  for (int i = 0; i < 600; ++i) {  // Three chunks of up to 256 keys.
    keys.push_back(Key(i));
    if (i % 3 != 0) index.Insert(keys.back(), L1Entry(static_cast<uint64_t>(i)));
  }
  keys.push_back(Key(5));  // A key named twice is visited twice.
  std::vector<int> seen(keys.size(), 0);
  index.UpdateEach(keys, [&](size_t i, BlockEntry& e) {
    ++seen[i];
    EXPECT_EQ(e.offset, i == 600 ? 5u : i);
    ++e.refs;
  });
  for (size_t i = 0; i < 600; ++i) EXPECT_EQ(seen[i], i % 3 == 0 ? 0 : 1) << i;
  EXPECT_EQ(seen[600], 1);
  EXPECT_EQ(index.Find(Key(5))->refs, 2u);
  EXPECT_EQ(index.Find(Key(7))->refs, 1u);
  index.UpdateEach({}, [](size_t, BlockEntry&) { ADD_FAILURE(); });
}

TEST(BlockIndexTest, LongestPrefixStopsAtFirstMissAndReportsTiers) {
  BlockIndex index;
  index.Insert(Key(0), L1Entry(0));
  BlockEntry both = L1Entry(0);
  both.tiers |= TierBit(Tier::kL3);
  index.Insert(Key(1), both);
  BlockEntry l2;
  l2.tiers = TierBit(Tier::kL2);
  index.Insert(Key(2), l2);
  index.Insert(Key(4), L1Entry(0));  // after a gap: not part of the prefix
  std::vector<BlockKey> chain = {Key(0), Key(1), Key(2), Key(3), Key(4)};
  PrefixMatch m = index.LongestPrefix(chain);
  EXPECT_EQ(m.hits, 3u);
  EXPECT_EQ(m.tiers, (std::vector<Tier>{Tier::kL1, Tier::kL1, Tier::kL2}));
  EXPECT_EQ(index.LongestPrefix({}).hits, 0u);
}

TEST(BlockIndexTest, PendingEntriesAreNotPartOfAPrefix) {
  BlockIndex index;
  BlockEntry pending;
  pending.flags = BlockEntry::kPending;
  index.Insert(Key(0), pending);
  std::vector<BlockKey> chain = {Key(0)};
  EXPECT_EQ(index.LongestPrefix(chain).hits, 0u);
}

// Chains longer than 16 keys are probed shard by shard in chunks of 256: the prefix must
// stop at the first miss (or pending entry) whatever chunk or shard it falls in.
TEST(BlockIndexTest, LongChainPrefixAcrossChunksAndShards) {
  for (size_t shards : {1, 64}) {
    BlockIndex index(shards);
    std::vector<BlockKey> chain;
    for (int i = 0; i < 700; ++i) {
      chain.push_back(Key(i));
      BlockEntry e = L1Entry(i);
      if (i % 3 == 0) e.tiers = TierBit(Tier::kL2);
      if (i != 450) index.Insert(Key(i), e);
    }
    PrefixMatch m = index.LongestPrefix(chain);
    ASSERT_EQ(m.hits, 450u) << shards;
    ASSERT_EQ(m.tiers.size(), 450u);
    ASSERT_EQ(m.fingerprints.size(), 450u);
    for (size_t i = 0; i < m.hits; ++i) {
      EXPECT_EQ(m.tiers[i], i % 3 == 0 ? Tier::kL2 : Tier::kL1);
      EXPECT_EQ(m.fingerprints[i], chain[i].Fingerprint());
    }
    EXPECT_EQ(index.LongestPrefix(absl::MakeConstSpan(chain).first(450)).hits, 450u);
    BlockEntry pending = L1Entry(0);
    pending.flags = BlockEntry::kPending;
    index.Insert(Key(450), pending);
    EXPECT_EQ(index.LongestPrefix(chain).hits, 450u);
    index.Update(Key(450), [](BlockEntry& e) { e.flags = 0; });
    EXPECT_EQ(index.LongestPrefix(chain).hits, 700u);
    index.Erase(Key(3));
    EXPECT_EQ(index.LongestPrefix(chain).hits, 3u);
  }
}

TEST(BlockIndexTest, ConcurrentInsertFindErase) {
  BlockIndex index(8);
  constexpr int kThreads = 4, kPerThread = 2000;
  std::atomic<int> found{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        int k = t * kPerThread + i;
        ASSERT_TRUE(index.Insert(Key(k), L1Entry(k)));
        if (index.Find(Key(k)).has_value()) found.fetch_add(1);
        std::vector<BlockKey> chain = {Key(k), Key(k + 1)};
        index.LongestPrefix(chain);
        if (i % 2 == 0) {
          ASSERT_TRUE(index.Erase(Key(k)).has_value());
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(found.load(), kThreads * kPerThread);
  EXPECT_EQ(index.Size(), static_cast<size_t>(kThreads * kPerThread / 2));
  size_t visited = 0;
  index.ForEach([&](const BlockKey&, const BlockEntry&) { ++visited; });
  EXPECT_EQ(visited, index.Size());
}

}  // namespace
}  // namespace kvstrata
