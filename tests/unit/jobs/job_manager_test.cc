// JobManager over a real BlockCache (heap "region"), a real TierManager with an L2
// FileTier in a temp dir, and a fake TransferEngine that records each copy and completes it
// at once: loads of blocks that live only in L2 return their job id without waiting for the
// disk, and complete (exactly once, naming every block) when the promotion landed.
#include "daemon/jobs/job_manager.h"

#include <stdlib.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "daemon/testing/fault_file_system.h"
#include "gtest/gtest.h"
#include "tests/unit/tiering/tiered_cache.h"
#include "tests/unit/tiers/tier_test_data.h"

namespace kvstrata {
namespace {

namespace fs = std::filesystem;
constexpr uint64_t kBlock = 16 << 10;
constexpr SessionId kClient = 7;

// A completion sink (a fast-path connection's) that takes completions while `accept`.
class RecordingSink : public CompletionSink {
 public:
  explicit RecordingSink(bool accept) : accept_(accept) {}
  bool Deliver(SessionId session, const JobCompletion& completion) override {
    std::lock_guard<std::mutex> lock(mu_);
    offered_.push_back({session, completion.job_id});
    if (accept_) taken_.push_back(completion);
    return accept_;
  }
  std::vector<JobCompletion> taken() {
    std::lock_guard<std::mutex> lock(mu_);
    return taken_;
  }
  std::vector<std::pair<SessionId, JobId>> offered() {
    std::lock_guard<std::mutex> lock(mu_);
    return offered_;
  }

 private:
  const bool accept_;
  std::mutex mu_;
  std::vector<JobCompletion> taken_;
  std::vector<std::pair<SessionId, JobId>> offered_;
};

// Records the copies of every transfer; completes it on the calling thread.
class FakeEngine : public TransferEngine {
 public:
  absl::StatusOr<uint64_t> Register(uint64_t, const CudaMemorySpec&, uint64_t) override {
    return 1;
  }
  absl::Status Unregister(uint64_t, uint64_t) override { return absl::OkStatus(); }
  void EndSession(uint64_t) override {}
  absl::Status Submit(uint64_t, TransferRequest request,
                      std::function<void(TransferResult)> done) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      copies_ += request.blocks.size();
      layer_flag_value_ = request.layer_flag_value;
      last_blocks_ = request.blocks;
    }
    done(TransferResult{});
    return absl::OkStatus();
  }
  size_t copies() {
    std::lock_guard<std::mutex> lock(mu_);
    return copies_;
  }
  std::optional<uint64_t> layer_flag_value() {  // Of the last transfer.
    std::lock_guard<std::mutex> lock(mu_);
    return layer_flag_value_;
  }
  std::vector<BlockCopy> last_blocks() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_blocks_;
  }

 private:
  std::mutex mu_;
  size_t copies_ = 0;
  std::optional<uint64_t> layer_flag_value_;
  std::vector<BlockCopy> last_blocks_;
};

class JobManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kvs-jobs-XXXXXX";
    root_ = mkdtemp(tmpl);
    ns_ = namespaces_.Register(kClient, OpaqueTestSpec(kBlock, "jobs-test"))->id;
    FileTierOptions files;
    files.name = "l2";
    files.tier = Tier::kL2;
    files.root = root_;
    files.capacity_bytes = 64 << 20;
    faults_.SetHook([this](absl::string_view op, const std::string&) {
      if (op == "read" && hold_reads_) reads_released_.WaitForNotification();  // A slow disk.
      return absl::OkStatus();
    });
    files.files = &faults_;
    BuildTieredCache(&namespaces_, 8, absl::Seconds(10), files, {}, &l1_);
    ASSERT_FALSE(HasFatalFailure());
    tiers_ = l1_.manager.get();
    cache_ = l1_.l1.get();
    store_ = std::make_unique<BlockStore>(cache_, tiers_, BlockStoreOptions{});
    jobs_ = std::make_unique<JobManager>(store_.get(), &engine_, absl::OkStatus());
    jobs_->OpenSession(kClient);
    CudaMemorySpec spec;
    auto reg = jobs_->RegisterCuda(kClient, ns_, kBlock, spec);
    ASSERT_TRUE(reg.ok()) << reg.status();
    registration_ = *reg;
  }
  void TearDown() override {
    if (!reads_released_.HasBeenNotified()) reads_released_.Notify();
    jobs_.reset();
    tiers_->Stop();
    l1_.cache.reset();
    l1_.manager.reset();
    fs::remove_all(root_);
  }

  // Blocks written through to L2, then dropped from L1: they now live only on disk.
  std::vector<std::string> StoreOnlyInL2(int count) {
    std::vector<std::string> keys;
    for (int i = 0; i < count; ++i) keys.push_back(absl::StrCat("k", i));
    std::vector<std::string_view> views(keys.begin(), keys.end());
    auto reserved = cache_->ReserveStore(kClient, ns_, kBlock, views);
    EXPECT_TRUE(reserved.ok()) << reserved.status();
    for (size_t i = 0; i < keys.size(); ++i) {
      std::string data = Payload(kBlock, static_cast<int>(i));
      std::memcpy(l1_.region.data() + reserved->slots[i].offset, data.data(), kBlock);
    }
    EXPECT_TRUE(cache_->CommitStore(kClient, reserved->reservation, std::nullopt).ok());
    for (int i = 0; i < 500 && tiers_->Status()[0].queued_writes > 0; ++i) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    EXPECT_EQ(cache_->Clear(ns_), keys.size());
    return keys;
  }
  absl::StatusOr<uint64_t> Load(const std::vector<std::string>& keys,
                                std::optional<uint64_t> layer_flag_value = std::nullopt,
                                SinkPtr sink = nullptr) {
    JobBlocks blocks;
    for (size_t i = 0; i < keys.size(); ++i) {
      blocks.keys.emplace_back(keys[i]);
      blocks.block_ids.push_back(static_cast<uint32_t>(i));
    }
    return jobs_->SubmitLoad(kClient, ns_, registration_, blocks, std::nullopt, layer_flag_value,
                             std::move(sink));
  }
  std::vector<JobCompletion> WaitCompletions(size_t n) {
    std::vector<JobCompletion> out;
    for (int i = 0; i < 100 && out.size() < n; ++i) {
      jobs_->completions().Wait(kClient, absl::Milliseconds(100));
      for (JobCompletion& c : jobs_->completions().Poll(kClient, 0)) out.push_back(std::move(c));
    }
    return out;
  }

  std::string root_;
  FaultFileSystem faults_;  // under the L2 tier; outlives it
  NamespaceRegistry namespaces_;
  NamespaceId ns_ = 0;
  TieredCache l1_;
  TierManager* tiers_ = nullptr;       // l1_'s
  PartitionedCache* cache_ = nullptr;  // l1_'s
  FakeEngine engine_;
  std::unique_ptr<BlockStore> store_;
  std::unique_ptr<JobManager> jobs_;
  uint64_t registration_ = 0;
  std::atomic<bool> hold_reads_{false};
  absl::Notification reads_released_;
};

TEST_F(JobManagerTest, LoadFromL2ReturnsBeforeTheDiskAndCompletesAfterIt) {
  auto keys = StoreOnlyInL2(4);
  hold_reads_ = true;  // The disk answers only when the test says so.
  const absl::Time start = absl::Now();
  auto job = Load(keys);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));  // Not held up by the held read.
  EXPECT_TRUE(jobs_->completions().Poll(kClient, 0).empty());
  EXPECT_EQ(engine_.copies(), 0u);
  absl::SleepFor(absl::Milliseconds(20));
  reads_released_.Notify();
  auto done = WaitCompletions(1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].job_id, *job);
  EXPECT_TRUE(done[0].ok()) << done[0].error;
  // The daemon's own job time covers the wait for the disk.
  EXPECT_GE(done[0].elapsed, absl::Milliseconds(20));
  EXPECT_LE(done[0].elapsed, absl::Now() - start);
  EXPECT_EQ(engine_.copies(), 4u);
  EXPECT_EQ(jobs_->active_jobs(), 0u);
}

TEST_F(JobManagerTest, LoadOfL1BlocksStaysSynchronous) {
  auto keys = StoreOnlyInL2(3);
  auto first = Load(keys);  // Promotes them back into L1.
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(WaitCompletions(1).size(), 1u);
  hold_reads_ = true;  // Any disk read would now hang the test.
  auto second = Load(keys);
  ASSERT_TRUE(second.ok()) << second.status();
  auto done = jobs_->completions().Poll(kClient, 0);  // Completed inside the call.
  ASSERT_EQ(done.size(), 1u);
  EXPECT_TRUE(done[0].ok());
  EXPECT_EQ(engine_.copies(), 6u);
}

// vLLM hands a request's blocks out in descending order: the slots still ascend with the
// GPU block ids, so that each tensor's pieces group into 2-D copies.
TEST_F(JobManagerTest, AStoreTakesSlotsInTheOrderOfTheGpuBlockIds) {
  JobBlocks blocks;
  std::vector<std::string> keys;
  for (uint32_t i = 0; i < 6; ++i) keys.push_back(absl::StrCat("desc", i));
  for (uint32_t i = 0; i < 6; ++i) {
    blocks.keys.emplace_back(keys[i]);
    blocks.block_ids.push_back(20 - i);
  }
  auto job = jobs_->SubmitStore(kClient, ns_, kBlock, registration_, blocks, std::nullopt);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(WaitCompletions(1).size(), 1u);
  std::vector<BlockCopy> copies = engine_.last_blocks();
  ASSERT_EQ(copies.size(), 6u);
  std::sort(copies.begin(), copies.end(),
            [](const BlockCopy& a, const BlockCopy& b) { return a.block_id < b.block_id; });
  for (size_t i = 1; i < copies.size(); ++i) {
    EXPECT_LT(copies[i - 1].host_offset, copies[i].host_offset) << "block " << copies[i].block_id;
  }
}

// A layer-wise load runs in the engine's step: L1 blocks are copied at once (the flag value
// passed to the engine), blocks only on disk fail at once and nothing is promoted.
TEST_F(JobManagerTest, LayerWiseLoadCopiesL1BlocksAndNeverWaitsForTheDisk) {
  auto keys = StoreOnlyInL2(2);
  auto first = Load({keys[0]});  // keys[0] back in L1; keys[1] only on disk.
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(WaitCompletions(1).size(), 1u);
  hold_reads_ = true;  // Any disk read would now hang the test.
  const uint64_t promotions = tiers_->Status()[0].promotions;
  auto job = Load(keys, 4u);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(engine_.layer_flag_value(), std::optional<uint64_t>(4u));
  auto done = jobs_->completions().Poll(kClient, 0);  // Completed inside the call.
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].failed_blocks, std::vector<uint32_t>{1});
  EXPECT_EQ(engine_.copies(), 2u);  // The first load's block and this one's L1 block.
  EXPECT_EQ(tiers_->Status()[0].promotions, promotions);
}

// A job frame of version 2 names its connection as the sink: the completion goes there
// (from the deferred-load thread too) and not to the queue; a sink that cannot take it
// (connection gone or full) leaves it to the queue, so it is never lost.
TEST_F(JobManagerTest, CompletionsGoToTheJobsSinkOrElseToTheQueue) {
  auto keys = StoreOnlyInL2(3);
  auto taking = std::make_shared<RecordingSink>(true);
  auto deferred = Load(keys, std::nullopt, taking);  // Waits for L2: the deferred thread.
  ASSERT_TRUE(deferred.ok()) << deferred.status();
  for (int i = 0; i < 200 && taking->taken().empty(); ++i) absl::SleepFor(absl::Milliseconds(10));
  ASSERT_EQ(taking->taken().size(), 1u);
  EXPECT_EQ(taking->taken()[0].job_id, *deferred);
  EXPECT_TRUE(taking->taken()[0].ok()) << taking->taken()[0].error;
  EXPECT_EQ(taking->offered()[0].first, kClient);
  EXPECT_TRUE(jobs_->completions().Poll(kClient, 0).empty());

  auto refusing = std::make_shared<RecordingSink>(false);
  std::vector<std::string> partly = {keys[0], "never-stored"};
  auto direct = Load(partly, std::nullopt, refusing);  // In L1 now: completes in the call.
  ASSERT_TRUE(direct.ok()) << direct.status();
  ASSERT_EQ(refusing->offered().size(), 1u);
  auto queued = jobs_->completions().Poll(kClient, 0);
  ASSERT_EQ(queued.size(), 1u);
  EXPECT_EQ(queued[0].job_id, *direct);
  EXPECT_EQ(queued[0].failed_blocks, std::vector<uint32_t>{1});

  JobBlocks store;  // A store of keys already cached copies nothing and completes at once.
  store.keys = {keys[1]};
  store.block_ids = {0};
  auto stored =
      jobs_->SubmitStore(kClient, ns_, kBlock, registration_, store, std::nullopt, taking);
  ASSERT_TRUE(stored.ok()) << stored.status();
  ASSERT_EQ(taking->taken().size(), 2u);
  EXPECT_EQ(taking->taken()[1].job_id, *stored);
  EXPECT_EQ(taking->taken()[1].kind, JobCompletion::Kind::kStore);
  EXPECT_TRUE(jobs_->completions().Poll(kClient, 0).empty());
}

TEST_F(JobManagerTest, MissingBlocksFailOnceAndSessionEndDropsQueuedLoads) {
  auto keys = StoreOnlyInL2(2);
  keys.push_back("never-stored");
  auto job = Load(keys);
  ASSERT_TRUE(job.ok());
  auto done = WaitCompletions(1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].failed_blocks, std::vector<uint32_t>{2});
  EXPECT_EQ(engine_.copies(), 2u);
  // A load queued behind a held disk read, then its session ends: no completion, no copy,
  // and EndSession returns once the read is released.
  cache_->Clear(ns_);
  hold_reads_ = true;
  ASSERT_TRUE(Load({keys[0], keys[1]}).ok());
  absl::Notification ended;
  std::thread ender([&] {
    jobs_->EndSession(kClient);
    ended.Notify();
  });
  absl::SleepFor(absl::Milliseconds(50));
  reads_released_.Notify();
  ender.join();
  EXPECT_TRUE(ended.HasBeenNotified());
  EXPECT_EQ(jobs_->active_jobs(), 0u);
}

}  // namespace
}  // namespace kvstrata
