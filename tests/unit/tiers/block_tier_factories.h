// The factories of every BlockTier kind (daemon/tiers/block_tier.h) that the typed suites
// run against: block_tier_contract_test.cc (what each kind keeps) and block_tier_front_test.cc
// (the front's checks, counts, metrics and batch calls). Each factory owns what its tier
// needs and hands out the tier and namespaces. A new kind of tier adds its factory here and
// to BlockTierFactories at the bottom.
#ifndef KVSTRATA_TESTS_UNIT_TIERS_BLOCK_TIER_FACTORIES_H_
#define KVSTRATA_TESTS_UNIT_TIERS_BLOCK_TIER_FACTORIES_H_

#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>
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
namespace tier_contract {

inline constexpr uint64_t kPayload = 8192;

inline TierNamespace MakeNamespace(const std::string& model) {
  NamespaceSpec spec = OpaqueTestSpec(kPayload, model);
  return TierNamespace{Fingerprint(spec), spec, kPayload};
}

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

using BlockTierFactories = ::testing::Types<MemoryFactory, LocalFileFactory, SharedFileFactory,
                                            InMemoryFileFactory, L1Factory>;

}  // namespace tier_contract
}  // namespace kvstrata

#endif  // KVSTRATA_TESTS_UNIT_TIERS_BLOCK_TIER_FACTORIES_H_
