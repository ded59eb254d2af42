// The BlockTier contract (daemon/tiers/block_tier.h), one typed suite that every tier
// passes: the in-memory fake, every kind registered in the tier factory (local-file,
// shared-file: real directories, built by MakeTier), FileTier as a local tier on a
// MemoryFileSystem, and L1 through its adapter (a BlockCache over a heap region). A new kind
// adds its name and factory to tests/unit/tiers/block_tier_factories.h; the front's own
// checks, counts and batch calls are block_tier_front_test.cc's.
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/unit/tiers/block_tier_factories.h"
#include "tests/unit/tiers/tier_test_data.h"

namespace kvstrata {
namespace {

using tier_contract::kPayload;

template <typename Factory>
class BlockTierContractTest : public ::testing::Test {
 protected:
  void SetUp() override {
    KVSTRATA_SKIP_UNLESS_AVAILABLE(factory_);
    ns_ = factory_.Namespace("contract-a");
  }
  BlockTier& tier() { return factory_.Get(); }
  std::string Read(const TierNamespace& ns, const std::string& key) {
    std::string out(ns.payload_bytes, '\0');
    return tier().Read(ns, key, absl::MakeSpan(out)) ? out : std::string();
  }

  Factory factory_;
  TierNamespace ns_;
};

TYPED_TEST_SUITE(BlockTierContractTest, tier_contract::BlockTierFactories,
                 tier_contract::BlockTierFactoryNames);

TYPED_TEST(BlockTierContractTest, AWrittenBlockReadsBackByteExact) {
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(
        this->tier().Write(this->ns_, "key-" + std::to_string(i), Payload(kPayload, i)).ok());
  }
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(this->Read(this->ns_, "key-" + std::to_string(i)), Payload(kPayload, i)) << i;
    EXPECT_EQ(this->tier().Cached(this->ns_, "key-" + std::to_string(i)),
              BlockTier::Presence::kPresent);
  }
  EXPECT_EQ(this->tier().Stats().blocks, 5u);
}

TYPED_TEST(BlockTierContractTest, AnAbsentBlockMisses) {
  std::string dest(kPayload, 'x');
  EXPECT_FALSE(this->tier().Read(this->ns_, "never-written", absl::MakeSpan(dest)));
  EXPECT_FALSE(this->tier().Probe(this->ns_, "never-written"));
  EXPECT_EQ(this->tier().Cached(this->ns_, "never-written"), BlockTier::Presence::kAbsent);
}

TYPED_TEST(BlockTierContractTest, WritingAPresentKeySucceedsAndKeepsOneBlock) {
  ASSERT_TRUE(this->tier().Write(this->ns_, kKey, Payload(kPayload, 1)).ok());
  EXPECT_TRUE(this->tier().Write(this->ns_, kKey, Payload(kPayload, 1)).ok());
  EXPECT_EQ(this->tier().Stats().blocks, 1u);
  EXPECT_EQ(this->Read(this->ns_, kKey), Payload(kPayload, 1));
}

TYPED_TEST(BlockTierContractTest, AWrongSizeIsRefusedAndLeavesNothing) {
  EXPECT_FALSE(this->tier().Write(this->ns_, kKey, Payload(kPayload - 1, 1)).ok());
  EXPECT_FALSE(this->tier().Write(this->ns_, kKey, Payload(2 * kPayload, 1)).ok());
  EXPECT_EQ(this->Read(this->ns_, kKey), "");
  EXPECT_EQ(this->tier().Stats().blocks, 0u);
}

TYPED_TEST(BlockTierContractTest, RemoveDeletesOneBlockOnce) {
  ASSERT_TRUE(this->tier().Write(this->ns_, "a", Payload(kPayload, 1)).ok());
  ASSERT_TRUE(this->tier().Write(this->ns_, "b", Payload(kPayload, 2)).ok());
  EXPECT_TRUE(this->tier().Remove(this->ns_, "a"));
  EXPECT_FALSE(this->tier().Remove(this->ns_, "a"));
  EXPECT_EQ(this->Read(this->ns_, "a"), "");
  EXPECT_NE(this->tier().Cached(this->ns_, "a"), BlockTier::Presence::kPresent);
  EXPECT_EQ(this->Read(this->ns_, "b"), Payload(kPayload, 2));
  EXPECT_EQ(this->tier().Stats().blocks, 1u);
}

TYPED_TEST(BlockTierContractTest, ClearOfOneNamespaceKeepsTheOthers) {
  TierNamespace other = this->factory_.Namespace("contract-b");
  ASSERT_NE(other.fingerprint, this->ns_.fingerprint);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(this->tier().Write(this->ns_, "k" + std::to_string(i), Payload(kPayload, i)).ok());
  }
  ASSERT_TRUE(this->tier().Write(other, "k0", Payload(kPayload, 9)).ok());
  EXPECT_EQ(this->tier().Clear(this->ns_.fingerprint), 3u);
  EXPECT_EQ(this->Read(this->ns_, "k0"), "");
  EXPECT_EQ(this->Read(other, "k0"), Payload(kPayload, 9));
  EXPECT_EQ(this->tier().Clear(std::nullopt), 1u);
  EXPECT_EQ(this->tier().Stats().blocks, 0u);
}

TYPED_TEST(BlockTierContractTest, ConcurrentWritersOfOneKeyLeaveOneWholeBlock) {
  const std::string payload = Payload(kPayload, 7);
  std::vector<std::thread> writers;
  for (int t = 0; t < 4; ++t) {
    writers.emplace_back([&] { EXPECT_TRUE(this->tier().Write(this->ns_, kKey, payload).ok()); });
  }
  for (std::thread& w : writers) w.join();
  EXPECT_EQ(this->Read(this->ns_, kKey), payload);
  EXPECT_EQ(this->tier().Stats().blocks, 1u);
}

}  // namespace
}  // namespace kvstrata
