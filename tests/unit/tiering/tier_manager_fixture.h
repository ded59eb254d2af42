// TierManagerTest: the fixture of the TierManager tests (tier_manager_test.cc,
// shared_tier_test.cc): a real BlockCache (heap "region") under a TierManager with one
// FileTier in a temp dir (L2, or L3 when shared) behind a FaultFileSystem, and the
// BlockStore over them; helpers to store, load, look up and count files.
#ifndef KVSTRATA_TESTS_UNIT_TIERING_TIER_MANAGER_FIXTURE_H_
#define KVSTRATA_TESTS_UNIT_TIERING_TIER_MANAGER_FIXTURE_H_

#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/pool/slab_allocator.h"
#include "daemon/store/block_store.h"
#include "daemon/testing/fault_file_system.h"
#include "daemon/tiering/tier_manager.h"
#include "gtest/gtest.h"
#include "tests/unit/tiering/tiered_cache.h"
#include "tests/unit/tiers/tier_test_data.h"

namespace kvstrata {

namespace tiering_test {
namespace fs = std::filesystem;

constexpr uint64_t kBlock = 16 << 10;
constexpr SessionId kClient = 7;

inline NamespaceSpec Spec() { return OpaqueTestSpec(kBlock, "tiering-test"); }

class TierManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kvs-tiering-XXXXXX";
    root_ = mkdtemp(tmpl);
    ns_ = namespaces_.Register(kClient, Spec())->id;
  }
  void TearDown() override {
    if (manager_ != nullptr) manager_->Stop();
    store_.reset();
    cache_.reset();
    manager_.reset();
    fs::remove_all(root_);
  }

  // L1 of `slabs` 64 KiB slabs; one lower tier (L2, or L3 when shared) with `options`.
  void Build(uint64_t slabs, bool shared, LowerTierOptions options,
             std::function<void(FileTierOptions&)> tweak = nullptr, bool wait_warm = true) {
    FileTierOptions files;
    files.name = shared ? "l3" : "l2";
    files.tier = shared ? Tier::kL3 : Tier::kL2;
    files.root = root_;
    files.capacity_bytes = 64 << 20;
    files.shared = shared;
    files.shared_eviction_interval = absl::Hours(1);
    if (tweak) tweak(files);
    TieredCache built;
    BuildTieredCache(&namespaces_, slabs, absl::Seconds(5), files, options, &built, wait_warm);
    if (HasFatalFailure()) return;
    region_ = std::move(built.region);  // The buffer moves with it: AttachL1's pointer holds.
    allocator_ = std::move(built.allocator);
    l1_ = std::move(built.l1);  // AttachL1's pointer: kept while manager_ lives
    manager_ = std::move(built.manager);
    cache_ = std::move(built.cache);
    store_ = std::make_unique<BlockStore>(l1_.get(), manager_.get(), BlockStoreOptions{});
  }

  std::vector<std::string> Keys(int count, const std::string& prefix = "k") {
    std::vector<std::string> out;
    for (int i = 0; i < count; ++i) out.push_back(absl::StrCat(prefix, i));
    return out;
  }
  static std::vector<std::string_view> Views(const std::vector<std::string>& keys) {
    return {keys.begin(), keys.end()};
  }
  // Host-mode store: reserve, write the payloads into the region, commit.
  void Store(const std::vector<std::string>& keys, int seed) {
    auto views = Views(keys);
    auto reserved = cache_->ReserveStore(kClient, ns_, kBlock, views);
    ASSERT_TRUE(reserved.ok()) << reserved.status();
    for (size_t i = 0; i < keys.size(); ++i) {
      const StoreSlot& slot = reserved->slots[i];
      if (slot.status != StoreStatus::kReserved) continue;
      std::string data = Payload(kBlock, seed + static_cast<int>(i));
      std::memcpy(region_.data() + slot.offset, data.data(), kBlock);
    }
    if (reserved->reservation != 0) {
      ASSERT_TRUE(cache_->CommitStore(kClient, reserved->reservation, std::nullopt).ok());
    }
  }
  // Starts the keys' promotions and waits for them (bounded): what a load does first.
  PendingLoad Promote(absl::Span<const std::string_view> views) {
    PendingLoad pending = store_->BeginLoad(ns_, views);
    manager_->promoter().Wait(pending.waits());
    return pending;
  }
  // Loads and checks every key; returns how many were byte-exact.
  size_t LoadExact(const std::vector<std::string>& keys, int seed,
                   std::optional<LeaseId> lease = std::nullopt) {
    auto views = Views(keys);
    PendingLoad promoted = Promote(views);
    auto loaded = cache_->AcquireLoad(kClient, ns_, views, lease);
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    size_t exact = 0;
    for (size_t i = 0; i < keys.size(); ++i) {
      const LoadSlot& slot = loaded->slots[i];
      if (slot.status != LoadStatus::kReady) continue;
      std::string want = Payload(kBlock, seed + static_cast<int>(i));
      exact += std::memcmp(region_.data() + slot.offset, want.data(), kBlock) == 0;
    }
    if (loaded->load != 0) {
      EXPECT_TRUE(cache_->ReleaseLoad(kClient, loaded->load).ok());
    }
    return exact;
  }
  // Every block write to the tier takes `delay`.
  void SlowWrites(FileTierOptions& f, absl::Duration delay = absl::Milliseconds(50)) {
    faults_.SetHook([delay](absl::string_view op, const std::string&) {
      if (op == "write") absl::SleepFor(delay);
      return absl::OkStatus();
    });
    f.files = &faults_;
  }
  void WaitQueueEmpty() {
    for (int i = 0; i < 500 && manager_->Status()[0].queued_writes > 0; ++i) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    ASSERT_EQ(manager_->Status()[0].queued_writes, 0u);
  }
  LookupResult Lookup(const std::vector<std::string>& keys,
                      std::optional<absl::Duration> lease = std::nullopt) {
    auto views = Views(keys);
    auto result = store_->Lookup(kClient, ns_, views, lease);
    EXPECT_TRUE(result.ok());
    return *result;
  }
  size_t FilesOnDisk() {
    size_t n = 0;
    for (const auto& e : fs::recursive_directory_iterator(root_)) {
      n += e.path().extension() == ".kv";
    }
    return n;
  }

  std::string root_;
  FaultFileSystem faults_;  // under the tier (FileTierOptions::files); outlives it
  NamespaceRegistry namespaces_;
  NamespaceId ns_ = 0;
  std::vector<char> region_;
  std::unique_ptr<SlabAllocator> allocator_;
  std::unique_ptr<PartitionedCache> l1_;  // over cache_; outlives manager_
  std::unique_ptr<TierManager> manager_;
  std::unique_ptr<BlockCache> cache_;
  std::unique_ptr<BlockStore> store_;  // over l1_ and manager_
};

}  // namespace tiering_test
}  // namespace kvstrata

#endif  // KVSTRATA_TESTS_UNIT_TIERING_TIER_MANAGER_FIXTURE_H_
