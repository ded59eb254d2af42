// ObjectJournal against a real S3 server (SeaweedFS): flushes are objects, a follower reads
// each other holder's once and never its own, old journals are skipped and deleted. (Its
// parsers are in object_parsers_test.cc; the tier that uses it in object_tier_test.cc.)
#include "daemon/tiers/object/object_journal.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/unit/tiers/object/object_tier_factory.h"

namespace kvstrata {
namespace {

class ObjectJournalBucketTest : public ::testing::Test {
 public:
  void SetUp() override {
    KVSTRATA_SKIP_OR_FAIL_WITHOUT_S3(S3TestServer::Shared());
    s3_ = *S3Client::Create(S3TestServer::Shared().Client());
    control_ = FreshObjectPrefix() + "/.kvstrata";
  }
  std::unique_ptr<ObjectJournal> Journal(const std::string& holder) {
    return std::make_unique<ObjectJournal>(s3_.get(), control_, holder, absl::Minutes(10));
  }
  size_t Objects() {
    auto listed = s3_->List(control_ + "/journal/");
    return listed.ok() ? listed->size() : 1000;
  }
  static std::vector<JournalEntry> Read(ObjectJournal& j, absl::Time now) {
    std::vector<JournalEntry> lines;
    EXPECT_TRUE(
        j.Follow(now, absl::Seconds(10), [&](const JournalEntry& e) { lines.push_back(e); }).ok());
    return lines;
  }

  std::unique_ptr<S3Client> s3_;
  std::string control_;
};

const std::string kFp(32, 'c');

TEST_F(ObjectJournalBucketTest, EachOtherHoldersFlushIsReadOnceInOrder) {
  auto a = Journal("a"), b = Journal("b");
  const absl::Time now = absl::Now();
  EXPECT_EQ(*a->Flush(now), 0u);  // nothing buffered: no object
  EXPECT_EQ(Objects(), 0u);
  a->Record(kFp, "k1", 100);
  a->Record(kFp, "k2", 100);
  EXPECT_EQ(*a->Flush(now), 2u);
  a->RecordRemoval(kFp, "k1");
  EXPECT_EQ(*a->Flush(now), 1u);  // same millisecond: the next name
  b->Record(kFp, "mine", 100);
  EXPECT_EQ(*b->Flush(now), 1u);
  EXPECT_EQ(Objects(), 3u);
  std::vector<JournalEntry> lines = Read(*b, now);
  ASSERT_EQ(lines.size(), 3u);  // A's, oldest first; not B's own
  EXPECT_EQ(lines[0].key, "k1");
  EXPECT_EQ(lines[1].key, "k2");
  EXPECT_TRUE(lines[2].removed);
  EXPECT_TRUE(Read(*b, now).empty());  // read once
  a->Record(kFp, "k3", 100);
  EXPECT_EQ(*a->Flush(now + absl::Seconds(1)), 1u);
  lines = Read(*b, now + absl::Seconds(1));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].key, "k3");
}

TEST_F(ObjectJournalBucketTest, JournalsOlderThanTheLookbackAreSkippedAndDeleted) {
  auto a = Journal("a");
  const absl::Time now = absl::Now();
  a->Record(kFp, "old", 100);
  EXPECT_EQ(*a->Flush(now - absl::Hours(1)), 1u);
  a->Record(kFp, "new", 100);
  EXPECT_EQ(*a->Flush(now), 1u);
  auto fresh = Journal("b");
  std::vector<JournalEntry> lines = Read(*fresh, now);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].key, "new");
  a->DropOwnBefore(now - absl::Minutes(10));  // a's own: the hour-old one goes
  EXPECT_EQ(Objects(), 1u);
  auto listed = s3_->List(control_ + "/");
  ASSERT_TRUE(listed.ok());
  fresh->DropListedBefore(*listed, absl::Now() + absl::Minutes(1));  // the trimmer's sweep
  EXPECT_EQ(Objects(), 0u);
}

}  // namespace
}  // namespace kvstrata
