// Test fixture: a BlockCache over a small slab allocator (64 KiB slabs of four 16 KiB
// blocks), a fake clock and a listener that records what it hears.
#ifndef KVSTRATA_TESTS_UNIT_CACHE_CACHE_FIXTURE_H_
#define KVSTRATA_TESTS_UNIT_CACHE_CACHE_FIXTURE_H_

#include <string>
#include <vector>

#include "daemon/cache/block_cache.h"
#include "daemon/common/mutex.h"
#include "daemon/testing/fake_clock.h"
#include "daemon/testing/recording_tier_listener.h"
#include "gtest/gtest.h"

namespace kvstrata {

class CacheTest : public ::testing::Test {
 public:
  static constexpr uint64_t kSlab = 64 << 10;
  static constexpr uint64_t kBlock = 16 << 10;
  static constexpr NamespaceId kNs = 1;

 protected:
  // Watermarks at 1.0: the whole pool is usable unless a test says otherwise.
  static BlockCacheOptions Opts() {
    BlockCacheOptions o;
    o.high_watermark = 1.0;
    o.low_watermark = 1.0;
    return o;
  }
  void Build(uint64_t slabs, BlockCacheOptions options = Opts()) {
    cache_.reset();
    allocator_ = *SlabAllocator::Create(
        {.region_bytes = slabs * kSlab, .slab_bytes = kSlab, .slot_alignment = 4096});
    options.clock = &clock_;
    options.listener = &listener_;
    cache_ = *BlockCache::Create(allocator_.get(), options);
  }
  void SetUp() override { Build(2); }

  static std::vector<std::string> Names(int first, int count) {
    std::vector<std::string> out;
    for (int i = first; i < first + count; ++i) out.push_back("k" + std::to_string(i));
    return out;
  }
  static std::vector<std::string_view> Views(const std::vector<std::string>& names) {
    return {names.begin(), names.end()};
  }
  // Reserves and commits `names` for `session`; returns the per-key statuses.
  std::vector<StoreStatus> Store(const std::vector<std::string>& names, SessionId session = 1,
                                 NamespaceId ns = kNs, uint64_t block = kBlock) {
    auto views = Views(names);
    absl::StatusOr<ReserveResult> r = cache_->ReserveStore(session, ns, block, views);
    EXPECT_TRUE(r.ok()) << r.status();
    std::vector<StoreStatus> out;
    for (const StoreSlot& s : r->slots) out.push_back(s.status);
    if (r->reservation != 0) {
      EXPECT_TRUE(cache_->CommitStore(session, r->reservation, std::nullopt).ok());
    }
    return out;
  }
  size_t Hits(const std::vector<std::string>& names, NamespaceId ns = kNs) {
    auto views = Views(names);
    return cache_->Lookup(9, ns, views, std::nullopt)->hits;
  }

  FakeClock clock_;
  RecordingTierListener listener_;
  std::unique_ptr<SlabAllocator> allocator_;
  std::unique_ptr<BlockCache> cache_;
};

}  // namespace kvstrata

#endif  // KVSTRATA_TESTS_UNIT_CACHE_CACHE_FIXTURE_H_
