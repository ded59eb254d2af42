// JournalFollower on a real directory: another holder's lines are read once each, in bucket
// order, and this daemon's own never; a line still being written is read once whole; bad,
// over-long and too-old lines name nothing; a deadline, or a fault reading a journal (through
// the tier's BlockFileSystem), leaves the rest for the next Poll.
#include "daemon/tiers/journal_follower.h"

#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "daemon/testing/fault_file_system.h"
#include "gtest/gtest.h"

namespace kvstrata {
namespace {

namespace fs = std::filesystem;
constexpr char kFp[] = "0123456789abcdef0123456789abcdef";

struct Line {
  std::string holder, key;
  bool removed = false;
  int64_t bucket = 0;
};

class JournalFollowerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kvs-follow-XXXXXX";
    root_ = mkdtemp(tmpl);
  }
  void TearDown() override { fs::remove_all(root_); }
  std::vector<Line> Poll(JournalFollower& f, absl::Duration budget = absl::InfiniteDuration()) {
    std::vector<Line> out;
    f.Poll(absl::Now(), budget, [&](const JournalEntry& e, absl::string_view holder, int64_t b) {
      out.push_back(Line{std::string(holder), e.key, e.removed, b});
    });
    return out;
  }
  // The keys of what Poll read, in order.
  std::vector<std::string> PolledKeys(JournalFollower& f) {
    std::vector<std::string> keys;
    for (const Line& line : Poll(f)) keys.push_back(line.key);
    return keys;
  }
  std::string LogPath(int64_t bucket, const std::string& holder) {
    const std::string dir = absl::StrFormat("%s/.kvstrata-journal/%010d", root_, bucket);
    fs::create_directories(dir);
    return dir + "/" + holder + ".log";
  }
  std::string root_;
};

TEST_F(JournalFollowerTest, AnotherHoldersLinesAreReadOnceAndOwnNever) {
  WriteJournal own(BlockFileSystem::Default(), root_, "me");
  WriteJournal other(BlockFileSystem::Default(), root_, "other");
  JournalFollower follower(&own, absl::Minutes(10));
  const absl::Time now = absl::Now();
  own.Record(now, kFp, "mine", 1);
  other.Record(now - absl::Minutes(1), kFp, "k1", 1);
  other.Record(now, kFp, "k2", 1);
  other.RecordRemoval(now, kFp, "k1");
  ASSERT_EQ(own.Flush(), 1u);
  ASSERT_EQ(other.Flush(), 3u);
  std::vector<Line> got = Poll(follower);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].key, "k1");  // the older bucket first
  EXPECT_EQ(got[0].bucket, WriteJournal::BucketOf(now - absl::Minutes(1)));
  EXPECT_EQ(got[1].key, "k2");
  EXPECT_EQ(got[2].key, "k1");
  EXPECT_TRUE(got[2].removed);
  EXPECT_EQ(got[2].holder, "other");
  EXPECT_TRUE(Poll(follower).empty());  // Nothing new.
  other.Record(now, kFp, "k3", 1);
  ASSERT_EQ(other.Flush(), 1u);
  EXPECT_EQ(PolledKeys(follower), std::vector<std::string>{"k3"});
}

TEST_F(JournalFollowerTest, ALineBeingWrittenIsReadOnceWhole) {
  WriteJournal own(BlockFileSystem::Default(), root_, "me");
  JournalFollower follower(&own, absl::Minutes(10));
  const int64_t bucket = WriteJournal::BucketOf(absl::Now());
  const std::string path = LogPath(bucket, "other");
  std::ofstream(path) << kFp << " 6b31 1\n" << kFp << " 6b3";
  EXPECT_EQ(PolledKeys(follower), std::vector<std::string>{"k1"});
  std::ofstream(path, std::ios::app) << "2 7\n";
  EXPECT_EQ(PolledKeys(follower), std::vector<std::string>{"k2"});
}

TEST_F(JournalFollowerTest, BadAndOverlongLinesNameNothing) {
  WriteJournal own(BlockFileSystem::Default(), root_, "me");
  JournalFollower follower(&own, absl::Minutes(10));
  const int64_t bucket = WriteJournal::BucketOf(absl::Now());
  const std::string path = LogPath(bucket, "other");
  std::ofstream(path) << "nonsense\n"
                      << kFp << " 6b31 -1\n"                                   // a negative size
                      << "../../etc/passwd 6b31 1\n"                           // a path
                      << std::string(3 * JournalFollower::kMaxLineBytes, 'x')  // no newline
                      << "\n"
                      << kFp << " 6b32 -\n";
  std::vector<Line> got = Poll(follower);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].key, "k2");
  EXPECT_TRUE(got[0].removed);
  // A file named like no journal, and a directory named like no bucket, are not read.
  std::ofstream(fs::path(path).parent_path() / "notes.txt") << kFp << " 6b33 1\n";
  fs::create_directories(root_ + "/.kvstrata-journal/123");
  std::ofstream(root_ + "/.kvstrata-journal/123/x.log") << kFp << " 6b34 1\n";
  EXPECT_TRUE(Poll(follower).empty());
}

TEST_F(JournalFollowerTest, BucketsOlderThanTheLookbackAreSkipped) {
  WriteJournal own(BlockFileSystem::Default(), root_, "me");
  WriteJournal other(BlockFileSystem::Default(), root_, "other");
  const absl::Time now = absl::Now();
  other.Record(now - absl::Minutes(30), kFp, "old", 1);
  other.Record(now - absl::Minutes(5), kFp, "recent", 1);
  ASSERT_EQ(other.Flush(), 2u);
  JournalFollower follower(&own, absl::Minutes(10));
  EXPECT_EQ(PolledKeys(follower), std::vector<std::string>{"recent"});
  // A bucket the trimmer dropped is forgotten, and a new one read.
  own.Drop(WriteJournal::BucketOf(now - absl::Minutes(5)));
  other.Record(now, kFp, "new", 1);
  ASSERT_EQ(other.Flush(), 1u);
  EXPECT_EQ(PolledKeys(follower), std::vector<std::string>{"new"});
}

TEST_F(JournalFollowerTest, APastDeadlineLeavesTheLinesForTheNextPoll) {
  WriteJournal own(BlockFileSystem::Default(), root_, "me");
  WriteJournal other(BlockFileSystem::Default(), root_, "other");
  JournalFollower follower(&own, absl::Minutes(10));
  other.Record(absl::Now(), kFp, "k", 1);
  ASSERT_EQ(other.Flush(), 1u);
  EXPECT_TRUE(Poll(follower, absl::ZeroDuration()).empty());
  EXPECT_EQ(Poll(follower).size(), 1u);
}

TEST_F(JournalFollowerTest, AFaultReadingAJournalLeavesItsLinesForTheNextPoll) {
  FaultFileSystem faults;
  std::atomic<bool> failing{true};
  faults.SetHook([&](absl::string_view op, const std::string&) {
    return op == "journal" && failing.load() ? absl::UnavailableError("EIO (injected)")
                                             : absl::OkStatus();
  });
  WriteJournal own(&faults, root_, "me");  // the follower reads through its filesystem
  WriteJournal other(BlockFileSystem::Default(), root_, "other");
  JournalFollower follower(&own, absl::Minutes(10));
  other.Record(absl::Now(), kFp, "k1", 1);
  other.Record(absl::Now(), kFp, "k2", 1);
  ASSERT_EQ(other.Flush(), 2u);
  EXPECT_TRUE(Poll(follower).empty());
  failing = false;
  EXPECT_EQ(PolledKeys(follower), (std::vector<std::string>{"k1", "k2"}));
  EXPECT_TRUE(Poll(follower).empty());
}

}  // namespace
}  // namespace kvstrata
