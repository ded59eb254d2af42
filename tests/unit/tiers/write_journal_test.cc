// WriteJournal on a real directory: lines land in the bucket of the minute they were
// recorded in and read back; only closed buckets are offered; every kind of bad line (torn,
// foreign, a path instead of a key) names nothing; a bucket is dropped whole; a fault in the
// journal's own I/O (through the tier's BlockFileSystem) drops or hides its lines.
#include "daemon/tiers/write_journal.h"

#include <stdlib.h>
#include <unistd.h>

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

class WriteJournalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kvs-journal-XXXXXX";
    root_ = mkdtemp(tmpl);
  }
  void TearDown() override { fs::remove_all(root_); }
  std::vector<JournalEntry> Entries(const WriteJournal& j, int64_t bucket) {
    std::vector<JournalEntry> out;
    EXPECT_TRUE(j.ForEachEntry(bucket, [&](const JournalEntry& e) {
      out.push_back(e);
      return true;
    }));
    return out;
  }
  std::string BucketDir(int64_t bucket) {
    return absl::StrFormat("%s/.kvstrata-journal/%010d", root_, bucket);
  }
  std::string root_;
};

TEST_F(WriteJournalTest, LinesLandInTheirMinutesBucketAndReadBack) {
  WriteJournal j(BlockFileSystem::Default(), root_, "node-a");
  const absl::Time t0 = absl::FromUnixSeconds(1'800'000'000);  // a minute boundary
  j.Record(t0 + absl::Seconds(5), kFp, "key-1", 12288);
  j.Record(t0 + absl::Seconds(59), kFp, std::string("\x00\xff", 2), 4096);
  j.Record(t0 + absl::Seconds(61), kFp, "key-3", 8192);
  EXPECT_EQ(j.Flush(), 3u);
  EXPECT_EQ(j.Flush(), 0u);  // Nothing new.
  const int64_t b0 = WriteJournal::BucketOf(t0);
  EXPECT_EQ(WriteJournal::BucketEnd(b0), t0 + absl::Minutes(1));
  EXPECT_TRUE(fs::exists(BucketDir(b0) + "/node-a.log"));
  std::vector<JournalEntry> first = Entries(j, b0);
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0].fingerprint, kFp);
  EXPECT_EQ(first[0].key, "key-1");
  EXPECT_EQ(first[0].file_bytes, 12288u);
  EXPECT_EQ(first[1].key, std::string("\x00\xff", 2));
  ASSERT_EQ(Entries(j, b0 + 1).size(), 1u);

  // A second daemon's file in the same bucket is read too; closed buckets come oldest first.
  WriteJournal other(BlockFileSystem::Default(), root_, "node-b");
  other.Record(t0, kFp, "key-4", 4096);
  ASSERT_EQ(other.Flush(), 1u);
  EXPECT_EQ(Entries(j, b0).size(), 3u);
  EXPECT_TRUE(j.ClosedBuckets(t0 + absl::Minutes(2)).empty());  // Not closed yet.
  EXPECT_EQ(j.ClosedBuckets(t0 + absl::Minutes(3)), std::vector<int64_t>{b0});
  EXPECT_EQ(j.ClosedBuckets(t0 + absl::Minutes(10)), (std::vector<int64_t>{b0, b0 + 1}));

  j.Drop(b0);
  EXPECT_FALSE(fs::exists(BucketDir(b0)));
  EXPECT_EQ(j.ClosedBuckets(t0 + absl::Minutes(10)), std::vector<int64_t>{b0 + 1});
}

TEST_F(WriteJournalTest, ForeignDirectoriesAndFilesAreIgnored) {
  WriteJournal j(BlockFileSystem::Default(), root_, "node-a");
  const absl::Time t0 = absl::FromUnixSeconds(1'800'000'000);
  j.Record(t0, kFp, "k", 1);
  ASSERT_EQ(j.Flush(), 1u);
  const int64_t b0 = WriteJournal::BucketOf(t0);
  fs::create_directories(root_ + "/.kvstrata-journal/not-a-bucket");
  fs::create_directories(root_ + "/.kvstrata-journal/12345");  // Too few digits.
  std::ofstream(root_ + "/.kvstrata-journal/0000000001") << "a file, not a bucket\n";
  std::ofstream(BucketDir(b0) + "/notes.txt") << kFp << " 6b 1\n";  // Not a .log.
  EXPECT_EQ(j.ClosedBuckets(t0 + absl::Hours(1)), std::vector<int64_t>{b0});
  EXPECT_EQ(Entries(j, b0).size(), 1u);
}

TEST_F(WriteJournalTest, BadLinesNameNothing) {
  JournalEntry e;
  const std::string fp = kFp;
  EXPECT_TRUE(WriteJournal::ParseLine(fp + " 6b6579 12288", &e));
  EXPECT_EQ(e.key, "key");
  for (const std::string& bad : std::vector<std::string>{
           "", fp, fp + " 6b6579", fp + " 6b6579 12288 extra", fp + "  6b6579 12288",
           "0123456789ABCDEF0123456789ABCDEF 6b6579 1",  // uppercase fingerprint
           "0123 6b6579 1",                              // short fingerprint
           "../../../../etc/passwd 6b6579 1",            // a path
           fp + " 6b657 1",                              // odd hex
           fp + " 6B6579 1",                             // uppercase hex
           fp + " zz 1",                                 // not hex
           fp + " " + std::string(66, 'a') + " 1",       // a 33-byte key
           fp + " ../6b 1",                              // a path instead of a key
           fp + " 6b6579 -1", fp + " 6b6579 1e3", fp + " 6b6579 ",
           fp + " 6b6579 99999999999999999999",  // 20 digits
       }) {
    EXPECT_FALSE(WriteJournal::ParseLine(bad, &e)) << bad;
  }
  // In a file: the good lines are read, a torn last line (no newline) is not.
  const int64_t bucket = 29'000'000;
  fs::create_directories(BucketDir(bucket));
  std::ofstream(BucketDir(bucket) + "/x.log") << fp << " 6b31 1\nnonsense\n"
                                              << fp << " 6b32 2\n"
                                              << fp << " 6b3";
  WriteJournal j(BlockFileSystem::Default(), root_, "node-a");
  std::vector<JournalEntry> got = Entries(j, bucket);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].key, "k1");
  EXPECT_EQ(got[1].key, "k2");
}

TEST_F(WriteJournalTest, AFlushThatCannotWriteDropsItsLines) {
  // The journal directory's place is taken by a file: nothing can be created under it.
  std::ofstream(root_ + "/.kvstrata-journal") << "in the way\n";
  WriteJournal j(BlockFileSystem::Default(), root_, "node-a");
  j.Record(absl::Now(), kFp, "k", 1);
  EXPECT_EQ(j.Flush(), 0u);
  EXPECT_EQ(j.Flush(), 0u);  // Dropped, not retried forever.
  EXPECT_TRUE(j.ClosedBuckets(absl::Now() + absl::Hours(1)).empty());
}

// The journal's appends and reads go through the filesystem seam, so a fault injected
// there is seen: a failed append drops its lines (counted, not retried), a failed read
// names nothing.
TEST_F(WriteJournalTest, AFaultInTheJournalsIoIsSeen) {
  FaultFileSystem faults;
  std::atomic<bool> failing{true};
  faults.SetHook([&](absl::string_view op, const std::string&) {
    return op == "journal" && failing.load() ? absl::UnavailableError("EIO (injected)")
                                             : absl::OkStatus();
  });
  WriteJournal j(&faults, root_, "node-a");
  const absl::Time t0 = absl::FromUnixSeconds(1'800'000'000);
  const int64_t bucket = WriteJournal::BucketOf(t0);
  j.Record(t0, kFp, "lost", 1);
  EXPECT_EQ(j.Flush(), 0u);
  failing = false;
  j.Record(t0, kFp, "kept", 2);
  EXPECT_EQ(j.Flush(), 1u);
  std::vector<JournalEntry> read = Entries(j, bucket);
  ASSERT_EQ(read.size(), 1u);
  EXPECT_EQ(read[0].key, "kept");
  failing = true;
  EXPECT_TRUE(Entries(j, bucket).empty());
}

TEST_F(WriteJournalTest, StoppingEarlyLeavesTheRestUnseen) {
  WriteJournal j(BlockFileSystem::Default(), root_, "node-a");
  const absl::Time t0 = absl::FromUnixSeconds(1'800'000'000);
  for (int i = 0; i < 5; ++i) j.Record(t0, kFp, std::string(1, static_cast<char>('a' + i)), 1);
  ASSERT_EQ(j.Flush(), 5u);
  int seen = 0;
  EXPECT_FALSE(
      j.ForEachEntry(WriteJournal::BucketOf(t0), [&](const JournalEntry&) { return ++seen < 2; }));
  EXPECT_EQ(seen, 2);
}

}  // namespace
}  // namespace kvstrata
