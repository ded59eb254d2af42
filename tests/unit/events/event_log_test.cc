#include "daemon/events/event_log.h"

#include "gtest/gtest.h"

namespace kvstrata {
namespace {

LoggedBatch Batch(uint32_t ns) {
  KvEvent e;
  e.kind = KvEventKind::kBlockStored;
  e.block_hashes = {ns};
  e.namespace_id = ns;
  return LoggedBatch{KvEventBatch{0, 1.0, "m", {e}}, "kv@p@m", "payload"};
}

TEST(EventLogTest, DenseSequenceFromZero) {
  EventLog log(10);
  EXPECT_EQ(log.Append(Batch(1)), 0u);
  EXPECT_EQ(log.Append(Batch(1)), 1u);
  EventPage page = log.Read(0, 100, 0);
  ASSERT_EQ(page.batches.size(), 2u);
  EXPECT_EQ(page.batches[1].seq, 1u);
  EXPECT_EQ(page.next_seq, 2u);
  EXPECT_FALSE(page.truncated);
  EXPECT_TRUE(log.Read(2, 100, 0).batches.empty());
  EXPECT_EQ(log.Read(2, 100, 0).next_seq, 2u);
}

TEST(EventLogTest, MaxBatchesAndResume) {
  EventLog log(10);
  for (int i = 0; i < 5; ++i) log.Append(Batch(1));
  EventPage first = log.Read(0, 2, 0);
  ASSERT_EQ(first.batches.size(), 2u);
  EXPECT_EQ(first.next_seq, 2u);
  EventPage rest = log.Read(first.next_seq, 100, 0);
  ASSERT_EQ(rest.batches.size(), 3u);
  EXPECT_EQ(rest.batches.front().seq, 2u);
}

TEST(EventLogTest, OverrunIsReportedAsTruncated) {
  EventLog log(3);
  for (int i = 0; i < 5; ++i) log.Append(Batch(1));
  EventPage page = log.Read(0, 100, 0);
  EXPECT_TRUE(page.truncated);
  ASSERT_EQ(page.batches.size(), 3u);
  EXPECT_EQ(page.batches.front().seq, 2u);
  std::vector<PublishedBatch> published = log.Published(3);
  ASSERT_EQ(published.size(), 2u);
  EXPECT_EQ(published[0].seq, 3u);
  EXPECT_EQ(published[0].topic, "kv@p@m");  // the replay socket sends the topic too
  EXPECT_EQ(published[0].payload, "payload");
  EXPECT_TRUE(log.Read(9, 100, 0).truncated);  // ahead of what was published
}

TEST(EventLogTest, NamespaceFilterSkipsOtherBatchesButAdvances) {
  EventLog log(10);
  log.Append(Batch(1));
  log.Append(Batch(2));
  log.Append(Batch(1));
  EventPage page = log.Read(0, 100, 2);
  ASSERT_EQ(page.batches.size(), 1u);
  EXPECT_EQ(page.batches[0].seq, 1u);
  EXPECT_EQ(page.next_seq, 3u);
}

}  // namespace
}  // namespace kvstrata
