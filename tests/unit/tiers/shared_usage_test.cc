// The shared tier's usage ledger (daemon/tiers/shared_usage.h) on a real file: its format
// and every class of bad text, reservations against a limit, releases, reconciliation after
// a scan, and concurrent reservations that never pass the limit.
#include "daemon/tiers/shared_usage.h"

#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace kvstrata {
namespace {

TEST(UsageLedgerFormat, RoundTrips) {
  for (UsageLedger l : {UsageLedger{0, 0, {}}, UsageLedger{123456789, 1764000000000, {}},
                        UsageLedger{~0ull >> 1, 9, {{"node-1.42.0a0b", 5, 6}, {"b", 0, 1}}}}) {
    EXPECT_EQ(ParseUsageLedger(FormatUsageLedger(l)), l);
  }
  EXPECT_EQ(FormatUsageLedger({42, 7, {{"n.1.ff", 3, 4}}}),
            "kvstrata-usage 1\nbytes 42\nscanned 7\nholder n.1.ff 3 4\n");
}

TEST(UsageLedgerFormat, RejectsEveryOtherText) {
  for (const char* bad : {
           "",                                                           // empty (new file)
           "kvstrata-usage 1\nbytes 42\nscanned 7",                      // torn: no final newline
           "kvstrata-usage 1\nbytes 42\n",                               // torn: a line missing
           "kvstrata-usage 2\nbytes 42\nscanned 7\n",                    // another version
           "something else\nbytes 42\nscanned 7\n",                      // a foreign file
           "kvstrata-usage 1\nbytes -42\nscanned 7\n",                   // a sign
           "kvstrata-usage 1\nbytes +42\nscanned 7\n",                   //
           "kvstrata-usage 1\nbytes  42\nscanned 7\n",                   // spaces
           "kvstrata-usage 1\nbytes 042\nscanned 7\n",                   // a leading zero
           "kvstrata-usage 1\nbytes 4x2\nscanned 7\n",                   // not a number
           "kvstrata-usage 1\nbytes 99999999999999999999\nscanned 7\n",  // overflow
           "kvstrata-usage 1\nbytes \nscanned 7\n",                      // no number
           "kvstrata-usage 1\nscanned 7\nbytes 42\n",                    // lines out of order
           "kvstrata-usage 1\nbytes 42\nscanned 7\nextra 1\n",           // an unknown line
           "kvstrata-usage 1\nbytes 42\nscanned 7\nholder a 1\n",        // a short holder
           "kvstrata-usage 1\nbytes 42\nscanned 7\nholder a/b 1 2\n",    // a bad id
           "kvstrata-usage 1\nbytes 42\nscanned 7\nholder a 1 2 3\n",    // a long holder
           "kvstrata-usage 1\nbytes 42\nscanned 7\nholder a x 2\n",      // bad bytes
           "kvstrata-usage 1\nbytes 42\nscanned 7\nholder a 1 2\nholder a 3 4\n",  // twice
           "kvstrata-usage 1\r\nbytes 42\r\nscanned 7\r\n",                        // CRLF
       }) {
    EXPECT_FALSE(ParseUsageLedger(bad).has_value()) << bad;
  }
  EXPECT_FALSE(
      ParseUsageLedger(std::string("kvstrata-usage 1\nbytes 4\0002\nscanned 7\n", 38)).has_value());
  std::string many = "kvstrata-usage 1\nbytes 1\nscanned 1\n";
  for (size_t i = 0; i <= SharedUsage::kMaxHolders; ++i)
    absl::StrAppend(&many, "holder h", i, " 1 1\n");
  EXPECT_FALSE(ParseUsageLedger(many).has_value());  // more holders than a ledger keeps
}

class SharedUsageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kvs-usage-XXXXXX";
    root_ = mkdtemp(tmpl);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  std::string root_;
};

TEST_F(SharedUsageTest, ReservesUpToTheLimitAndReleases) {
  SharedUsage usage(BlockFileSystem::Default(), root_, "a");
  absl::StatusOr<SharedUsage::Grant> g = usage.Reserve(60, 100, 0, 5);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(g->granted);
  EXPECT_EQ(g->after.bytes, 60u);
  EXPECT_EQ(g->after.holders, (std::vector<UsageHolder>{{"a", 60, 5}}));
  g = usage.Reserve(41, 100, 60, 6);
  ASSERT_TRUE(g.ok());
  EXPECT_FALSE(g->granted);
  EXPECT_EQ(g->after.bytes, 60u);
  g = usage.Reserve(40, 100, 10, 7);  // 50 of the first grant written meanwhile
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(g->granted);
  EXPECT_EQ(g->after.holders, (std::vector<UsageHolder>{{"a", 50, 7}}));
  absl::StatusOr<UsageLedger> l = usage.Release(30, 0, 8);
  EXPECT_EQ(l->bytes, 70u);
  EXPECT_TRUE(l->holders.empty());                  // holds nothing: its line goes
  EXPECT_EQ(usage.Release(1000, 0, 9)->bytes, 0u);  // never below zero
  // Another daemon's view of the same directory reads the same file.
  SharedUsage other(BlockFileSystem::Default(), root_);
  EXPECT_EQ(other.Read()->bytes, 0u);
}

TEST_F(SharedUsageTest, HoldersKeepTheirOwnLines) {
  SharedUsage a(BlockFileSystem::Default(), root_, "a"), b(BlockFileSystem::Default(), root_, "b");
  ASSERT_TRUE(a.Reserve(10, 100, 0, 1).ok());
  ASSERT_TRUE(b.Reserve(20, 100, 0, 2).ok());
  EXPECT_EQ(a.Hold(4, 3)->held(), 24u);
  EXPECT_EQ(b.Hold(0, 4)->holders, (std::vector<UsageHolder>{{"a", 4, 3}}));
  // Past kMaxHolders, the line updated longest ago makes room.
  for (size_t i = 0; i < SharedUsage::kMaxHolders; ++i) {
    ASSERT_TRUE(SharedUsage(BlockFileSystem::Default(), root_, absl::StrCat("h", i))
                    .Hold(1, 10 + static_cast<int64_t>(i))
                    .ok());
  }
  UsageLedger l = *a.Read();
  EXPECT_EQ(l.holders.size(), SharedUsage::kMaxHolders);
  EXPECT_EQ(l.holders.front().id, "h0");  // "a" (updated at 3) went
  EXPECT_FALSE(SharedUsage::MakeHolderId().empty());
  EXPECT_NE(SharedUsage::MakeHolderId(), SharedUsage::MakeHolderId());
}

TEST_F(SharedUsageTest, AnOverfullLedgerGrantsNothing) {
  std::ofstream(root_ + "/.kvstrata-usage") << "kvstrata-usage 1\nbytes 500\nscanned 3\n";
  SharedUsage usage(BlockFileSystem::Default(), root_);
  absl::StatusOr<SharedUsage::Grant> g = usage.Reserve(1, 100, 0, 4);
  ASSERT_TRUE(g.ok());
  EXPECT_FALSE(g->granted);
  EXPECT_EQ(g->after, (UsageLedger{500, 3, {}}));
}

TEST_F(SharedUsageTest, ABadFileReadsAsEmptyAndIsRewritten) {
  const std::string path = root_ + "/.kvstrata-usage";
  std::ofstream(path) << "garbage";
  SharedUsage usage(BlockFileSystem::Default(), root_);
  EXPECT_EQ(*usage.Read(), (UsageLedger{0, 0, {}}));
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text.size(), 16u << 10);  // always 16 KiB: the text, then zero bytes
  EXPECT_EQ(text.substr(0, text.find('\0')), FormatUsageLedger({0, 0, {}}));
  EXPECT_EQ(text.find_first_not_of('\0', text.find('\0')), std::string::npos);
  // Over 16 KiB: an error (the tier then works without the ledger), never a crash.
  std::ofstream(path, std::ios::trunc) << std::string(17000, 'x');
  EXPECT_EQ(usage.Read().status().code(), absl::StatusCode::kOutOfRange);
}

TEST_F(SharedUsageTest, ADirectoryItCannotUseIsAnError) {
  SharedUsage usage(BlockFileSystem::Default(), root_ + "/no/such/dir");
  EXPECT_FALSE(usage.Read().ok());
  EXPECT_FALSE(usage.Reserve(1, 100, 0, 1).ok());
}

TEST_F(SharedUsageTest, ReconcileCountsWhatTheScanCouldNotSee) {
  const int64_t now = 10'000'000'000;
  const int64_t expiry = absl::ToInt64Milliseconds(SharedUsage::kHolderExpiry);
  SharedUsage usage(BlockFileSystem::Default(), root_);
  SharedUsage dead(BlockFileSystem::Default(), root_, "dead");
  SharedUsage alive(BlockFileSystem::Default(), root_, "alive");
  ASSERT_TRUE(dead.Reserve(600, 1000, 0, now - expiry - 1).ok());  // died holding 600
  ASSERT_TRUE(alive.Reserve(100, 1000, 0, now - 5).ok());          // holds 100 unwritten
  const UsageLedger at_start = *usage.Read();                      // the scan begins
  ASSERT_TRUE(alive.Reserve(50, 1000, 0, now).ok());  // its 100 landed; 50 more meanwhile
  absl::StatusOr<UsageLedger> after = usage.Reconcile(at_start, 200, now);
  ASSERT_TRUE(after.ok());
  // 200 found + the 100 "alive" held at the start (the scan may have passed its files'
  // directory before they landed) + 50 reserved during the scan; "dead" expired.
  EXPECT_EQ(*after, (UsageLedger{350, now, {{"alive", 50, now}}}));
  // A release during the scan (the daemon stopped) takes nothing off: what it held at the
  // start may have landed as files the scan passed.
  const UsageLedger start2 = *usage.Read();
  ASSERT_TRUE(alive.Release(50, 0, now).ok());
  EXPECT_EQ(*usage.Reconcile(start2, 200, now + 1), (UsageLedger{250, now + 1, {}}));
}

TEST_F(SharedUsageTest, ConcurrentReservationsNeverPassTheLimit) {
  constexpr int kThreads = 8, kEach = 50;
  std::atomic<int> granted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      SharedUsage usage(BlockFileSystem::Default(), root_);  // one per "daemon"
      for (int i = 0; i < kEach; ++i) {
        absl::StatusOr<SharedUsage::Grant> g = usage.Reserve(3, 300, 0, 1);
        ASSERT_TRUE(g.ok()) << g.status();
        if (g->granted) granted.fetch_add(1);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(granted.load(), 100);
  EXPECT_EQ(SharedUsage(BlockFileSystem::Default(), root_).Read()->bytes, 300u);
}

}  // namespace
}  // namespace kvstrata
