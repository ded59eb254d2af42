// The BlockTier contract (daemon/tiers/block_tier.h), one typed suite that every tier
// passes: the in-memory fake, FileTier as a local L2 and as a shared L3 (real directories),
// FileTier as a local L2 on a MemoryFileSystem, and L1 through its adapter (a BlockCache over a
// heap region). A new tier adds its factory to the list at the bottom.
#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "daemon/cache/block_cache.h"
#include "daemon/cache/partitioned_cache.h"
#include "daemon/namespaces/namespace_registry.h"
#include "daemon/pool/slab_allocator.h"
#include "daemon/testing/memory_file_system.h"
#include "daemon/testing/memory_tier.h"
#include "daemon/tiering/l1_tier.h"
#include "daemon/tiers/file_tier.h"
#include "gtest/gtest.h"
#include "tests/unit/tiers/tier_test_data.h"

namespace kvstrata {
namespace {

constexpr uint64_t kPayload = 8192;

TierNamespace MakeNamespace(const std::string& model) {
  NamespaceSpec spec = OpaqueTestSpec(kPayload, model);
  return TierNamespace{Fingerprint(spec), spec, kPayload};
}

// Each factory owns what its tier needs and hands out the tier and two namespaces.
struct MemoryFactory {
  MemoryTier tier{Tier::kL2};
  BlockTier& Get() { return tier; }
  TierNamespace Namespace(const std::string& model) { return MakeNamespace(model); }
};

class FileFactory {
 public:
  explicit FileFactory(bool shared) {
    char tmpl[] = "/tmp/kvs-contract-XXXXXX";
    root_ = mkdtemp(tmpl);
    auto opened = FileTier::Open(TestFileTierOptions(root_, shared));
    EXPECT_TRUE(opened.ok()) << opened.status();
    tier_ = *std::move(opened);
    EXPECT_TRUE(tier_->WaitWarm(absl::Seconds(5)));
  }
  ~FileFactory() {
    tier_.reset();
    std::filesystem::remove_all(root_);
  }
  BlockTier& Get() { return *tier_; }
  TierNamespace Namespace(const std::string& model) { return MakeNamespace(model); }

 private:
  std::string root_;
  std::unique_ptr<FileTier> tier_;
};
struct LocalFileFactory : FileFactory {
  LocalFileFactory() : FileFactory(false) {}
};
struct SharedFileFactory : FileFactory {
  SharedFileFactory() : FileFactory(true) {}
};

// A local FileTier whose files are in memory (no directory on disk).
class InMemoryFileFactory {
 public:
  InMemoryFileFactory() {
    FileTierOptions options = TestFileTierOptions("/memory/l2", /*shared=*/false);
    options.files = &files_;
    auto opened = FileTier::Open(std::move(options));
    EXPECT_TRUE(opened.ok()) << opened.status();
    tier_ = *std::move(opened);
    EXPECT_TRUE(tier_->WaitWarm(absl::Seconds(5)));
  }
  BlockTier& Get() { return *tier_; }
  TierNamespace Namespace(const std::string& model) { return MakeNamespace(model); }

 private:
  MemoryFileSystem files_;  // outlives the tier
  std::unique_ptr<FileTier> tier_;
};

class L1Factory {
 public:
  static constexpr uint64_t kSlab = 1 << 20;
  static constexpr uint64_t kSlabs = 8;
  L1Factory() : region_(kSlabs * kSlab, '\0') {
    allocator_ = *SlabAllocator::Create(
        {.region_bytes = kSlabs * kSlab, .slab_bytes = kSlab, .slot_alignment = 4096});
    cache_ = *BlockCache::Create(allocator_.get(), BlockCacheOptions{});
    l1_ = std::make_unique<PartitionedCache>(
        std::vector<PartitionedCache::Partition>{{cache_.get(), 0, kSlabs * kSlab}});
    tier_ = std::make_unique<L1Tier>(l1_.get(), region_.data(), &namespaces_);
  }
  BlockTier& Get() { return *tier_; }
  // L1 holds blocks of registered namespaces only.
  TierNamespace Namespace(const std::string& model) {
    TierNamespace ns = MakeNamespace(model);
    absl::StatusOr<NamespaceInfo> info = namespaces_.Register(1, ns.spec);
    EXPECT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->fingerprint, ns.fingerprint);
    return ns;
  }

 private:
  std::vector<char> region_;
  NamespaceRegistry namespaces_;
  std::unique_ptr<SlabAllocator> allocator_;
  std::unique_ptr<BlockCache> cache_;
  std::unique_ptr<PartitionedCache> l1_;
  std::unique_ptr<L1Tier> tier_;
};

template <typename Factory>
class BlockTierContractTest : public ::testing::Test {
 protected:
  void SetUp() override { ns_ = factory_.Namespace("contract-a"); }
  BlockTier& tier() { return factory_.Get(); }
  std::string Read(const TierNamespace& ns, const std::string& key) {
    std::string out(ns.payload_bytes, '\0');
    return tier().Read(ns, key, absl::MakeSpan(out)) ? out : std::string();
  }

  Factory factory_;
  TierNamespace ns_;
};

using Factories = ::testing::Types<MemoryFactory, LocalFileFactory, SharedFileFactory,
                                   InMemoryFileFactory, L1Factory>;
TYPED_TEST_SUITE(BlockTierContractTest, Factories);

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
