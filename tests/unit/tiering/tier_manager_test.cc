// TierManager over a real BlockCache (heap "region") and real FileTiers in temp dirs:
// write-through and write-back, lookups that continue below L1 and lease what they find,
// loads that wait for promotion, drain, and a slow disk that must not hold a lookup up.
// Lookups and loads go through the BlockStore over them, as the daemon's do (it makes the
// leases the promotions join).
#include "daemon/tiering/tier_manager.h"

#include "daemon/testing/recording_metrics_sink.h"
#include "daemon/tiers/block_path.h"
#include "tests/unit/tiering/tier_manager_fixture.h"

namespace kvstrata {
namespace {

using namespace tiering_test;  // NOLINT: kBlock, kClient, fs

TEST_F(TierManagerTest, WriteThroughWritesEveryCommittedBlock) {
  Build(4, /*shared=*/false, {});
  Store(Keys(8), 100);
  WaitQueueEmpty();
  EXPECT_EQ(FilesOnDisk(), 8u);
  EXPECT_EQ(manager_->Status()[0].stats.writes, 8u);
}

TEST_F(TierManagerTest, LookupContinuesBelowL1AndLeasesPromotedBlocks) {
  Build(4, /*shared=*/false, {});
  auto keys = Keys(8);
  Store(keys, 200);
  WaitQueueEmpty();
  ASSERT_EQ(cache_->Clear(ns_), 8u);  // L1 forgets; L2 keeps.
  LookupResult hit = Lookup(keys, absl::Seconds(30));
  EXPECT_EQ(hit.hits, 8u);
  EXPECT_EQ(hit.tiers, std::vector<Tier>(8, Tier::kL2));
  ASSERT_TRUE(hit.lease.has_value());
  EXPECT_EQ(LoadExact(keys, 200, hit.lease), 8u);
  EXPECT_EQ(manager_->Status()[0].promoted_blocks, 8u);
  LookupResult again = Lookup(keys);
  EXPECT_EQ(again.tiers, std::vector<Tier>(8, Tier::kL1));
}

TEST_F(TierManagerTest, BlocksTheTierHoldsAreNotQueuedForWritingAgain) {
  Build(4, /*shared=*/false, {});
  auto keys = Keys(8);
  Store(keys, 250);
  WaitQueueEmpty();
  const uint64_t written = manager_->Status()[0].stats.writes;
  EXPECT_EQ(written, 8u);
  EXPECT_EQ(manager_->Status()[0].present_writes, 0u);
  // The engine stores the same blocks again (it recomputed a hit it did not load): the
  // tier's index holds them, so nothing is queued or written.
  ASSERT_EQ(cache_->Clear(ns_), 8u);
  Store(keys, 250);
  EXPECT_EQ(manager_->Status()[0].present_writes, 8u);
  EXPECT_EQ(manager_->Status()[0].queued_writes, 0u);
  // A promotion commits into L1 as a store does: not written back down either.
  ASSERT_EQ(cache_->Clear(ns_), 8u);
  EXPECT_EQ(LoadExact(keys, 250), 8u);
  EXPECT_EQ(manager_->Status()[0].present_writes, 16u);
  WaitQueueEmpty();
  EXPECT_EQ(manager_->Status()[0].stats.writes, written);
  // A block the tier lacks is still written.
  Store(Keys(1, "new"), 260);
  WaitQueueEmpty();
  EXPECT_EQ(manager_->Status()[0].stats.writes, written + 1);
}

TEST_F(TierManagerTest, PromotedBlocksInALeaseAreNotEvicted) {
  Build(2, /*shared=*/false, {});  // 8 slots of L1
  auto keys = Keys(8);
  Store(keys, 300);
  WaitQueueEmpty();
  ASSERT_EQ(cache_->Clear(ns_), 8u);
  LookupResult hit = Lookup(keys, absl::Seconds(30));
  ASSERT_EQ(hit.hits, 8u);
  (void)Promote(Views(keys));    // Promotions done, blocks in the lease.
  Store(Keys(8, "other"), 400);  // Pressure: nothing of the lease may go.
  EXPECT_EQ(LoadExact(keys, 300, hit.lease), 8u);
}

TEST_F(TierManagerTest, LoadWithoutLookupPromotesAndWaits) {
  Build(4, /*shared=*/false, {});
  auto keys = Keys(4);
  Store(keys, 500);
  WaitQueueEmpty();
  ASSERT_EQ(cache_->Clear(ns_), 4u);
  EXPECT_EQ(LoadExact(keys, 500), 4u);
}

// Issue 15: after a restart, while the tier's index is still being scanned, a load that no
// lookup preceded must still find the blocks on disk (it probes them, as a lookup does).
TEST_F(TierManagerTest, LoadWithoutLookupDuringTheRestartScanFindsBlocksOnDisk) {
  Build(4, /*shared=*/false, {});
  auto keys = Keys(4);
  Store(keys, 550);
  WaitQueueEmpty();
  // The daemon restarts: empty L1, and an L2 whose warm-up scan takes its time.
  cache_.reset();
  manager_.reset();
  l1_.reset();
  allocator_.reset();
  Build(
      4, /*shared=*/false, {},
      [this](FileTierOptions& f) {
        faults_.SetHook([slowed = std::make_shared<std::atomic<bool>>(false)](absl::string_view op,
                                                                              const std::string&) {
          if (op == "scan" && !slowed->exchange(true)) absl::SleepFor(absl::Seconds(2));
          return absl::OkStatus();
        });
        f.files = &faults_;
      },
      /*wait_warm=*/false);
  ASSERT_FALSE(manager_->Status()[0].stats.warm);
  EXPECT_EQ(LoadExact(keys, 550), 4u);
}

// Issue 46: a load's keys are not a chain. A load that no lookup preceded probes every key
// its tiers' indexes cannot tell -- not only those before the first absent one (the crash
// loop on L3 missed acknowledged blocks on disk that way: 70 in 100 cycles).
TEST_F(TierManagerTest, LoadWithoutLookupProbesEveryKeyNotOnlyAChain) {
  Build(4, /*shared=*/false, {});
  auto keys = Keys(4);
  Store(keys, 570);
  WaitQueueEmpty();
  const std::string fingerprint = namespaces_.Find(ns_)->fingerprint;
  ASSERT_TRUE(fs::remove(*BlockFilePath(root_, fingerprint, "k0")));  // lost before the kill
  cache_.reset();
  manager_.reset();
  l1_.reset();
  allocator_.reset();
  const std::string k0_path = *BlockFilePath(root_, fingerprint, "k0");
  Build(
      4, /*shared=*/false, {},
      [this, k0_path](FileTierOptions& f) {
        // The warm-up scan takes its time (keys stay unknown), and k0's probe answers first.
        faults_.SetHook([slowed = std::make_shared<std::atomic<bool>>(false), k0_path](
                            absl::string_view op, const std::string& path) {
          if (op == "scan" && !slowed->exchange(true)) absl::SleepFor(absl::Seconds(2));
          if (op == "probe" && path != k0_path) absl::SleepFor(absl::Milliseconds(50));
          return absl::OkStatus();
        });
        f.files = &faults_;
      },
      /*wait_warm=*/false);
  ASSERT_FALSE(manager_->Status()[0].stats.warm);
  EXPECT_EQ(LoadExact(keys, 570), 3u);  // k1, k2, k3
}

TEST_F(TierManagerTest, WriteBackWritesOnlyWhatL1Evicts) {
  LowerTierOptions options;
  options.write_back = true;
  Build(2, /*shared=*/false, options);  // 8 slots
  auto first = Keys(8, "a");
  Store(first, 600);
  WaitQueueEmpty();
  EXPECT_EQ(FilesOnDisk(), 0u);
  Store(Keys(4, "b"), 700);  // Evicts 4 of the first blocks.
  WaitQueueEmpty();
  EXPECT_EQ(FilesOnDisk(), 4u);
  LookupResult hit = Lookup(first, absl::Seconds(30));
  EXPECT_EQ(hit.hits, 8u);
  EXPECT_EQ(LoadExact(first, 600, hit.lease), 8u);
}

TEST_F(TierManagerTest, WriteThroughSurvivesEvictionBeforeTheWriteRuns) {
  LowerTierOptions options;
  options.io_threads = 1;
  Build(2, /*shared=*/false, options, [this](FileTierOptions& f) {
    faults_.SetHook([](absl::string_view op, const std::string&) {
      if (op == "write") absl::SleepFor(absl::Milliseconds(20));  // A slow disk.
      return absl::OkStatus();
    });
    f.files = &faults_;
  });
  auto keys = Keys(24);  // 3x L1: most blocks leave L1 before their write runs.
  for (int i = 0; i < 24; i += 4) {
    Store({keys.begin() + i, keys.begin() + i + 4}, 800 + i);
  }
  WaitQueueEmpty();
  EXPECT_EQ(FilesOnDisk(), 24u);
  ASSERT_EQ(cache_->Clear(ns_), cache_->Stats().blocks);
  for (int i = 0; i < 24; i += 4) {
    std::vector<std::string> four(keys.begin() + i, keys.begin() + i + 4);
    EXPECT_EQ(LoadExact(four, 800 + i), 4u) << i;
  }
}

TEST_F(TierManagerTest, EvictedCopiesStayWithinTheirBudgetAndTheRestIsShed) {
  LowerTierOptions options;
  options.io_threads = 1;
  options.evicted_copy_bytes = 2 * kBlock;  // room for two copies
  Build(2, /*shared=*/false, options, [this](FileTierOptions& f) { SlowWrites(f); });
  auto keys = Keys(24);  // 3x L1: most blocks leave L1 before their write runs.
  for (int i = 0; i < 24; i += 4) {
    Store({keys.begin() + i, keys.begin() + i + 4}, 820 + i);
  }
  WaitQueueEmpty();
  const LowerTierStatus st = manager_->Status()[0];
  const size_t on_disk = FilesOnDisk();
  EXPECT_EQ(on_disk + st.shed_writes, 24u) << "each block written or shed, never both";
  EXPECT_GE(st.shed_writes, 8u);
  EXPECT_EQ(st.dropped_writes, 0u);
  ASSERT_EQ(cache_->Clear(ns_), cache_->Stats().blocks);
  size_t loaded = 0;
  for (int i = 0; i < 24; i += 4) {  // what was written is exact; a shed block is a miss
    std::vector<std::string> four(keys.begin() + i, keys.begin() + i + 4);
    loaded += LoadExact(four, 820 + i);
  }
  EXPECT_LE(loaded, on_disk);
}

TEST_F(TierManagerTest, WriteBackDropsWhatItHasNoRoomToCopy) {
  LowerTierOptions options;
  options.write_back = true;
  options.io_threads = 1;
  options.evicted_copy_bytes = 2 * kBlock;
  Build(2, /*shared=*/false, options, [this](FileTierOptions& f) { SlowWrites(f); });
  Store(Keys(8, "a"), 840);
  Store(Keys(8, "b"), 850);  // evicts the 8 first blocks: 2 copied, the others dropped
  WaitQueueEmpty();
  const LowerTierStatus st = manager_->Status()[0];
  EXPECT_EQ(FilesOnDisk() + st.dropped_writes, 8u);
  EXPECT_GE(st.dropped_writes, 4u);
}

TEST_F(TierManagerTest, FullWriteQueueDropsAndCounts) {
  LowerTierOptions options;
  options.io_threads = 1;
  options.write_queue_blocks = 2;
  options.defer_when_full = false;  // backlog_policy "drop"
  Build(8, /*shared=*/false, options, [this](FileTierOptions& f) { SlowWrites(f); });
  absl::Time start = absl::Now();
  Store(Keys(16), 900);
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(40)) << "a store must not wait for disk";
  WaitQueueEmpty();
  LowerTierStatus st = manager_->Status()[0];
  EXPECT_EQ(st.dropped_writes + st.stats.writes, 16u);
  EXPECT_GE(st.dropped_writes, 13u);
  EXPECT_EQ(st.deferred_writes + st.shed_writes, 0u);
}

TEST_F(TierManagerTest, AFullQueueKeepsNewBlocksForTheirFirstHit) {
  LowerTierOptions options;  // backlog_policy "defer", the default
  options.io_threads = 1;
  options.write_queue_blocks = 4;
  Build(8, /*shared=*/false, options,
        [this](FileTierOptions& f) { SlowWrites(f, absl::Milliseconds(300)); });
  auto keys = Keys(16);
  Store(keys, 950);
  LowerTierStatus st = manager_->Status()[0];
  EXPECT_EQ(st.deferred_writes, 12u);  // set aside, not dropped
  EXPECT_EQ(st.dropped_writes, 0u);
  // Hits while the queue is still full: each takes the place of the newest queued block
  // not reused (keys 3, 2, 1), which waits for its own hit in turn.
  EXPECT_EQ(Lookup({keys[5], keys[6], keys[7]}).hits, 3u);
  st = manager_->Status()[0];
  EXPECT_EQ(st.deferred_writes, 12u);
  EXPECT_EQ(st.dropped_writes, 0u);
  WaitQueueEmpty();
  EXPECT_EQ(FilesOnDisk(), 4u);  // keys 0, 5, 6, 7
  // Hits with room: all queued.
  EXPECT_EQ(Lookup({keys[1], keys[8], keys[9]}).hits, 3u);
  WaitQueueEmpty();
  EXPECT_EQ(FilesOnDisk(), 7u);
  // The rest leave L1 unwritten: shed, not dropped.
  ASSERT_EQ(cache_->Clear(ns_), 16u);
  st = manager_->Status()[0];
  EXPECT_EQ(st.deferred_writes, 0u);
  EXPECT_EQ(st.shed_writes, 9u);
  EXPECT_EQ(st.dropped_writes, 0u);
  EXPECT_EQ(st.stats.writes, 7u);
}

TEST_F(TierManagerTest, AdmissionThresholdWritesAfterEnoughHits) {
  LowerTierOptions options;
  options.write_down_min_hits = 2;
  Build(4, /*shared=*/false, options);
  auto keys = Keys(2);
  Store(keys, 1000);
  WaitQueueEmpty();
  EXPECT_EQ(FilesOnDisk(), 0u);
  Lookup(keys);
  WaitQueueEmpty();
  EXPECT_EQ(FilesOnDisk(), 0u);
  Lookup(keys);
  WaitQueueEmpty();
  EXPECT_EQ(FilesOnDisk(), 2u);
}

TEST_F(TierManagerTest, SlowDiskDoesNotHoldUpALookup) {
  LowerTierOptions options;
  options.probe_timeout = absl::Milliseconds(5);
  Build(4, /*shared=*/true, options, [this](FileTierOptions& f) {
    faults_.SetHook([](absl::string_view op, const std::string&) {
      if (op == "probe") absl::SleepFor(absl::Seconds(1));
      return absl::OkStatus();
    });
    f.files = &faults_;
  });
  auto keys = Keys(4);
  absl::Time start = absl::Now();
  LookupResult miss = Lookup(keys, absl::Seconds(10));
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(200));
  EXPECT_EQ(miss.hits, 0u);
  // L1 hits never wait for the disk either.
  Store(keys, 1100);
  start = absl::Now();
  EXPECT_EQ(LoadExact(keys, 1100), 4u);
  EXPECT_EQ(Lookup(keys).hits, 4u);
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(200));
}

TEST_F(TierManagerTest, ProbesOfALookupRunInParallel) {
  // Issue 17: over FUSE a cold stat takes 1-16 ms; probed one after another, a chain of
  // L3 blocks another daemon wrote was mostly a miss within the probe timeout.
  LowerTierOptions options;
  options.probe_timeout = absl::Milliseconds(400);
  Build(4, /*shared=*/true, options);
  auto keys = Keys(16);
  Store(keys, 1300);
  WaitQueueEmpty();
  ASSERT_EQ(FilesOnDisk(), 16u);
  // Another daemon on the same directory: nothing in its L1 or index, every probe slow.
  manager_->Stop();
  cache_.reset();
  manager_.reset();
  l1_.reset();
  Build(4, /*shared=*/true, options, [this](FileTierOptions& f) {
    faults_.SetHook([](absl::string_view op, const std::string&) {
      if (op == "probe") absl::SleepFor(absl::Milliseconds(60));
      return absl::OkStatus();
    });
    f.files = &faults_;
  });
  absl::Time start = absl::Now();
  LookupResult found = Lookup(keys);
  // One after another: 16 x 60 ms = 960 ms, past the 400 ms limit.
  EXPECT_EQ(found.hits, 16u);
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(400));
  // A chain that ends: the keys after the first absent one are not counted.
  auto mixed = Keys(4);
  mixed.insert(mixed.begin() + 2, "absent");
  EXPECT_EQ(Lookup(mixed).hits, 2u);
}

TEST_F(TierManagerTest, DrainWritesWhatTheTierLacks) {
  LowerTierOptions options;
  options.write_back = true;
  Build(4, /*shared=*/false, options);
  Store(Keys(10), 1200);
  uint64_t last_done = 0, last_total = 0;
  auto written = manager_->write_down().Drain(std::nullopt, [&](uint64_t done, uint64_t total) {
    EXPECT_GE(done, last_done);
    last_done = done;
    last_total = total;
  });
  ASSERT_TRUE(written.ok());
  EXPECT_EQ(*written, 10u);
  EXPECT_EQ(last_done, 10u);
  EXPECT_EQ(last_total, 10u);
  EXPECT_EQ(FilesOnDisk(), 10u);
  EXPECT_EQ(*manager_->write_down().Drain(std::nullopt, [](uint64_t, uint64_t) {}), 0u);
  EXPECT_TRUE(absl::IsFailedPrecondition(
      manager_->write_down().Drain(Tier::kL3, [](uint64_t, uint64_t) {}).status()));
}

TEST_F(TierManagerTest, AdminPeekEvictAndClear) {
  Build(4, /*shared=*/false, {});
  auto keys = Keys(3);
  Store(keys, 1300);
  WaitQueueEmpty();
  cache_->Clear(ns_);
  auto views = Views(keys);
  std::vector<std::optional<Tier>> where(3);
  manager_->Peek(ns_, views, &where);
  EXPECT_EQ(where[0], Tier::kL2);
  EXPECT_EQ(manager_->Evict(ns_, absl::MakeConstSpan(views).first(1), std::nullopt), 1u);
  std::vector<bool> removed(2, false);  // the first key's file is gone already
  EXPECT_EQ(manager_->Evict(ns_, absl::MakeConstSpan(views).first(2), Tier::kL2, &removed), 1u);
  EXPECT_EQ(removed, (std::vector<bool>{false, true}));
  EXPECT_EQ(manager_->Evict(ns_, absl::MakeConstSpan(views).first(2), Tier::kL3), 0u);
  EXPECT_EQ(manager_->Clear(ns_, Tier::kL2), 1u);
  EXPECT_EQ(FilesOnDisk(), 0u);
}

// The write-down and the promoter record no copies of their own: the tier's front records
// each block once each way, as kvstrata_transfer_*{direction="l1_to_l2" / "l2_to_l1"} did.
TEST_F(TierManagerTest, EachBlockIsRecordedOnceEachWayByTheTier) {
  Build(4, /*shared=*/false, {});
  RecordingMetricsSink sink;
  manager_->SetMetrics(&sink);  // after AddTier: handed to the tiers already there
  auto keys = Keys(6);
  Store(keys, 1400);
  WaitQueueEmpty();
  EXPECT_EQ(sink.Count(Tier::kL2, CopyDirection::kDown), 6u);
  EXPECT_EQ(sink.Bytes(Tier::kL2, CopyDirection::kDown), 6 * kBlock);
  ASSERT_EQ(cache_->Clear(ns_), 6u);
  EXPECT_EQ(LoadExact(keys, 1400), 6u);
  EXPECT_EQ(sink.Count(Tier::kL2, CopyDirection::kUp), 6u);
  EXPECT_EQ(sink.Bytes(Tier::kL2, CopyDirection::kUp), 6 * kBlock);
  EXPECT_EQ(sink.copies().size(), 12u);
  const TierStats stats = manager_->Status()[0].stats;
  EXPECT_EQ(stats.writes, 6u);
  EXPECT_EQ(stats.hits, 6u);
  EXPECT_EQ(stats.read_bytes, 6 * kBlock);
  manager_->SetMetrics(nullptr);
}

// Admin peek of keys no index can tell (L2's warm-up scan still running): each is probed
// once, in one batch, and the absent one stays unset.
TEST_F(TierManagerTest, AdminPeekProbesWhatNoIndexKnows) {
  Build(4, /*shared=*/false, {});
  auto keys = Keys(4);
  Store(keys, 1500);
  WaitQueueEmpty();
  const std::string fingerprint = namespaces_.Find(ns_)->fingerprint;
  ASSERT_TRUE(fs::remove(*BlockFilePath(root_, fingerprint, "k2")));
  cache_.reset();
  manager_.reset();
  l1_.reset();
  allocator_.reset();
  auto probes = std::make_shared<std::atomic<int>>(0);
  Build(
      4, /*shared=*/false, {},
      [this, probes](FileTierOptions& f) {
        faults_.SetHook([slowed = std::make_shared<std::atomic<bool>>(false), probes](
                            absl::string_view op, const std::string&) {
          if (op == "scan" && !slowed->exchange(true)) absl::SleepFor(absl::Seconds(2));
          if (op == "probe") probes->fetch_add(1);
          return absl::OkStatus();
        });
        f.files = &faults_;
      },
      /*wait_warm=*/false);
  ASSERT_FALSE(manager_->Status()[0].stats.warm);
  auto views = Views(keys);
  std::vector<std::optional<Tier>> where(4);
  manager_->Peek(ns_, views, &where);
  EXPECT_EQ(where,
            (std::vector<std::optional<Tier>>{Tier::kL2, Tier::kL2, std::nullopt, Tier::kL2}));
  EXPECT_EQ(probes->load(), 4);
}

}  // namespace
}  // namespace kvstrata
