// The factories of every BlockTier kind (daemon/tiers/block_tier.h) that the typed suites
// run against: block_tier_contract_test.cc (what each kind keeps) and block_tier_front_test.cc
// (the front's checks, counts, metrics and batch calls). Each factory owns what its tier
// needs and hands out the tier and namespaces. The file kinds are built through the tier
// factory (MakeTier), as the daemon builds them; a new kind registered there adds its name
// to kRegisteredKinds and its factory to BlockTierFactories at the bottom.
#ifndef KVSTRATA_TESTS_UNIT_TIERS_BLOCK_TIER_FACTORIES_H_
#define KVSTRATA_TESTS_UNIT_TIERS_BLOCK_TIER_FACTORIES_H_

#include <stdlib.h>

#include <array>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/time/clock.h"
#include "daemon/cache/block_cache.h"
#include "daemon/cache/partitioned_cache.h"
#include "daemon/namespaces/namespace_registry.h"
#include "daemon/pool/slab_allocator.h"
#include "daemon/testing/memory_file_system.h"
#include "daemon/testing/memory_tier.h"
#include "daemon/tiering/l1_tier.h"
#include "daemon/tiers/file_tier.h"
#include "daemon/tiers/tier_factory.h"
#include "gtest/gtest.h"
#include "tests/unit/tiers/object/object_tier_factory.h"
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

// Every kind registered in the tier factory (daemon/tiers/tier_factory.h), each built by
// MakeTier from a [[tiers]] entry as the daemon builds it (KindFactory below);
// tier_factory_test.cc checks this list against TierKindNames(). A new kind adds its name
// here and its KindFactory<i> to BlockTierFactories.
inline constexpr std::array<std::string_view, 3> kRegisteredKinds = {"local-file", "shared-file",
                                                                     "object"};

// The entry a kind's tier is built from in the suites: its kind's defaults, a fresh
// directory, 64 MiB, no access-time records and no trim rounds of its own.
inline LowerTierConfig ContractEntry(std::string_view kind, const std::string& root) {
  LowerTierConfig entry;
  entry.name = std::string(kind) + "-contract";
  entry.kind = std::string(kind);
  entry.path = root;
  entry.capacity_bytes = 64 << 20;
  entry.access_record_interval_ms = 0;
  entry.eviction_interval_ms = 3'600'000;
  return entry;
}

template <size_t kKind>
class KindFactory {
 public:
  KindFactory() {
    char tmpl[] = "/tmp/kvs-contract-XXXXXX";
    root_ = mkdtemp(tmpl);
    const LowerTierConfig entry = ContractEntry(kRegisteredKinds[kKind], root_);
    absl::StatusOr<TierDescriptor> d = DescribeTier(entry);
    EXPECT_TRUE(d.ok()) << d.status();
    d->id = Tier::kL2;
    auto made = MakeTier(entry, *d, TierContext{});
    EXPECT_TRUE(made.ok()) << made.status();
    tier_ = *std::move(made);
    // The index is complete once warm (a local tier's start-up scan).
    for (int i = 0; i < 500 && !tier_->Stats().warm; ++i) absl::SleepFor(absl::Milliseconds(10));
    EXPECT_TRUE(tier_->Stats().warm);
  }
  ~KindFactory() {
    tier_.reset();
    std::filesystem::remove_all(root_);
  }
  BlockTier& Get() { return *tier_; }
  TierNamespace Namespace(const std::string& model) { return MakeNamespace(model); }

 private:
  std::string root_;
  std::unique_ptr<BlockTier> tier_;
};
using LocalFileFactory = KindFactory<0>;
using SharedFileFactory = KindFactory<1>;
// The object kind on the test binary's SeaweedFS (skips without one: SkipReason()).
struct ObjectFactory : ObjectTierFactory {
  static constexpr const char* kKindName = "object";  // the suites' name: <suite>/object
  TierNamespace Namespace(const std::string& model) { return MakeNamespace(model); }
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
                                            ObjectFactory, InMemoryFileFactory, L1Factory>;

// The typed suites' names: <suite>/<kKindName> where a factory has one (CTest selects the
// object kind's cases by it: tests/unit/tiers/CMakeLists.txt), else <suite>/<index>.
struct BlockTierFactoryNames {
  template <typename T>
  static std::string GetName(int index) {
    if constexpr (requires { T::kKindName; }) {
      return T::kKindName;
    } else {
      return std::to_string(index);
    }
  }
};

// Skips the test when `factory` cannot build its tier here (the object kind without a
// SeaweedFS binary), saying why; fails it instead where the factory says a skip is a
// failure (SkipIsFailure(): the object kind in CI, $KVSTRATA_REQUIRE_WEED=1).
#define KVSTRATA_SKIP_UNLESS_AVAILABLE(factory)                                  \
  do {                                                                           \
    if constexpr (requires { (factory).SkipReason(); }) {                        \
      if (!(factory).SkipReason().empty()) {                                     \
        if constexpr (requires { (factory).SkipIsFailure(); }) {                 \
          if ((factory).SkipIsFailure()) GTEST_FAIL() << (factory).SkipReason(); \
        }                                                                        \
        GTEST_SKIP() << (factory).SkipReason();                                  \
      }                                                                          \
    }                                                                            \
  } while (0)

}  // namespace tier_contract
}  // namespace kvstrata

#endif  // KVSTRATA_TESTS_UNIT_TIERS_BLOCK_TIER_FACTORIES_H_
