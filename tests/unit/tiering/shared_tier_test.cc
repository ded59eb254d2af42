// TierManager over a shared tier (L3 semantics on a local directory) that other nodes also
// change (issue 17): stopping while the tier's trim runs, a store after the block's file
// was deleted behind this daemon's back, and dropped writes counted once.
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "daemon/cache/tier_listener.h"
#include "daemon/metrics/metrics_sink.h"
#include "daemon/testing/recording_tier_listener.h"
#include "tests/unit/tiering/tier_manager_fixture.h"

namespace kvstrata {
namespace {

using namespace tiering_test;  // NOLINT: kBlock, kClient, fs

class SharedTierTest : public TierManagerTest {
 protected:
  // Deletes every block file, as another node's trim or an `rm` would.
  void DeleteFilesBehindTheDaemon() {
    std::vector<fs::path> doomed;
    for (const auto& e : fs::recursive_directory_iterator(root_)) {
      if (e.path().extension() == ".kv") doomed.push_back(e.path());
    }
    for (const fs::path& p : doomed) fs::remove(p);
    ASSERT_EQ(FilesOnDisk(), 0u);
  }
};

// Issue 17: at SIGTERM the L3 trim thread, mid-scan, reported removals through
// TierManager::OnLowerTierChange after the TierStack's namespace maps were destroyed (a
// heap corruption). Stop() must join it: no notice may arrive once Stop() returned.
TEST_F(SharedTierTest, StopJoinsATrimMidScanAndNoNoticeComesAfter) {
  RecordingTierListener listener;
  auto stats = std::make_shared<std::atomic<int>>(0);
  Build(4, /*shared=*/true, {}, [&](FileTierOptions& f) {
    f.capacity_bytes = 16 * BlockFileBytes(kBlock);  // 16 blocks' files
    f.high_watermark = 0.5;                          // trimmed once 8 are written
    f.low_watermark = 0.1;
    f.observer = [this](NamespaceId ns, absl::string_view key, bool stored, RemovalCause cause) {
      manager_->OnLowerTierChange(Tier::kL3, ns, key, stored, cause);
    };
    faults_.SetHook([stats](absl::string_view op, const std::string&) {
      if (op == "probe") {  // the trim stats every file: a slow network filesystem
        stats->fetch_add(1);
        absl::SleepFor(absl::Milliseconds(40));
      }
      return absl::OkStatus();
    });
    f.files = &faults_;
  });
  ASSERT_NE(manager_, nullptr);
  manager_->SetNextListener(&listener);
  Store(Keys(16), 1);  // the 9th write wakes the trim; 16 files x 40 ms of stats
  for (int i = 0; i < 500 && stats->load() < 3; ++i) absl::SleepFor(absl::Milliseconds(2));
  ASSERT_GE(stats->load(), 3) << "the trim did not start";
  const absl::Time start = absl::Now();
  manager_->Stop();
  listener.Close();
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(300)) << "Stop waited for a whole scan";
  EXPECT_GE(listener.lower(), 1u);          // the writes' notices came through before
  absl::SleepFor(absl::Milliseconds(800));  // longer than the rest of the scan would take
  EXPECT_EQ(listener.after_close(), 0u) << "a tier thread called back after Stop()";
  // TearDown destroys the manager: under ASan any late callback is a use after free.
}

// Issue 17: WriteFromL1 trusted the index (kPresent for 10 s after a write) and skipped the
// write of a block whose file another node had deleted: the file never came back.
TEST_F(SharedTierTest, StoreAfterTheFileWasDeletedElsewhereWritesItAgain) {
  Build(4, /*shared=*/true, {});
  auto keys = Keys(4);
  Store(keys, 10);
  WaitQueueEmpty();
  ASSERT_EQ(FilesOnDisk(), 4u);
  DeleteFilesBehindTheDaemon();
  ASSERT_EQ(cache_->Clear(ns_), 4u);
  Store(keys, 10);  // within the index's 10 s presence_ttl
  WaitQueueEmpty();
  EXPECT_EQ(FilesOnDisk(), 4u);
  LowerTierStatus st = manager_->Status()[0];
  EXPECT_EQ(st.stats.writes, 8u);
  EXPECT_EQ(st.stats.blocks, 4u);
  ASSERT_EQ(cache_->Clear(ns_), 4u);
  EXPECT_EQ(LoadExact(keys, 10), 4u);
}

TEST_F(SharedTierTest, StoreAgainWhileTheFileIsThereWritesOnce) {
  Build(4, /*shared=*/true, {});
  auto keys = Keys(4);
  Store(keys, 20);
  WaitQueueEmpty();
  ASSERT_EQ(cache_->Clear(ns_), 4u);
  Store(keys, 20);
  WaitQueueEmpty();
  EXPECT_EQ(FilesOnDisk(), 4u);
  EXPECT_EQ(manager_->Status()[0].stats.writes, 4u);
  // Drain of a shared tier checks the disk the same way: nothing to write.
  EXPECT_EQ(*manager_->write_down().Drain(Tier::kL3, [](uint64_t, uint64_t) {}), 0u);
  DeleteFilesBehindTheDaemon();
  EXPECT_EQ(*manager_->write_down().Drain(Tier::kL3, [](uint64_t, uint64_t) {}), 4u);
  EXPECT_EQ(FilesOnDisk(), 4u);
}

// Issue 17: a queue-full drop was counted both by a push to the metrics sink and by the
// daemon's scrape-time counter over dropped_writes: kvstrata_stores_dropped_total said
// twice the drops. The tiering counts it once, in dropped_writes (the sink has no push).
TEST_F(SharedTierTest, AQueueFullDropIsCountedOnce) {
  LowerTierOptions options;
  options.io_threads = 1;
  options.write_queue_blocks = 2;
  options.defer_when_full = false;  // backlog_policy "drop"
  Build(8, /*shared=*/true, options, [this](FileTierOptions& f) { SlowWrites(f); });
  Store(Keys(16), 30);
  WaitQueueEmpty();
  LowerTierStatus st = manager_->Status()[0];
  EXPECT_GE(st.dropped_writes, 13u);
  EXPECT_EQ(st.dropped_writes + st.stats.writes, 16u);
  manager_->Stop();
}

}  // namespace
}  // namespace kvstrata
