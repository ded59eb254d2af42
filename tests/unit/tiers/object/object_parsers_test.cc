// What the object tier reads from outside: credentials files, S3 XML bodies, usage records,
// journal objects. Every class of bad input is refused, never half-read.
#include "daemon/tiers/object/object_journal.h"
#include "daemon/tiers/object/object_usage.h"
#include "daemon/tiers/object/s3_credentials.h"
#include "daemon/tiers/object/s3_xml.h"
#include "gtest/gtest.h"

namespace kvstrata {
namespace {

TEST(S3CredentialsTest, AProfileIsRead) {
  auto c = ParseCredentialsFile(
      "# c\n[other]\naws_access_key_id = X\n[default]\naws_access_key_id = AK\n"
      "aws_secret_access_key = SK\naws_session_token = T\n",
      "f", "default");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->access_key_id, "AK");
  EXPECT_EQ(c->secret_access_key, "SK");
  EXPECT_EQ(c->session_token, "T");
}

TEST(S3CredentialsTest, BadFilesAreRefusedWithoutTheSecret) {
  for (const char* text : {"[default]\naws_access_key_id = AK\n",    // no secret
                           "[other]\naws_access_key_id = AK\n",      // no profile
                           "[default\naws_access_key_id = AK\n",     // bad section
                           "[default]\njust-a-line-with-SECRETX\n",  // not key = value
                           "[default]\naws_access_key_id =\naws_secret_access_key = S\n"}) {
    auto c = ParseCredentialsFile(text, "creds", "default");
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_EQ(c.status().message().find("SECRETX"), absl::string_view::npos);
  }
  EXPECT_EQ(LoadCredentials("/nonexistent/creds", "default").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(S3XmlTest, AListingPageIsRead) {
  auto page = ParseListObjectsV2(
      "<?xml version=\"1.0\"?><ListBucketResult xmlns=\"x\"><IsTruncated>true</IsTruncated>"
      "<NextContinuationToken>tok</NextContinuationToken><Contents><Key>a/b.kv</Key>"
      "<LastModified>2026-11-28T05:28:37.000Z</LastModified><Size>8192</Size></Contents>"
      "</ListBucketResult>");
  ASSERT_TRUE(page.ok()) << page.status();
  ASSERT_EQ(page->objects.size(), 1u);
  EXPECT_EQ(page->objects[0].key, "a/b.kv");
  EXPECT_EQ(page->objects[0].size, 8192u);
  EXPECT_EQ(absl::ToUnixSeconds(page->objects[0].last_modified), 1795843717);
  EXPECT_TRUE(page->truncated);
  EXPECT_EQ(page->next_token, "tok");
}

TEST(S3XmlTest, BadListingsAreDataLoss) {
  for (const char* xml : {
           "",                               // empty
           "<ListBucketResult><Contents>",   // cut short
           "<Error><Code>X</Code></Error>",  // another root
           "<ListBucketResult><Contents><Size>1</Size></Contents></ListBucketResult>",  // no key
           "<ListBucketResult><Contents><Key>k</Key><Size>x</Size></Contents></ListBucketResult>",
           "<ListBucketResult><Contents><Key>k</Key><Size>1</Size><LastModified>yesterday"
           "</LastModified></Contents></ListBucketResult>",
           "<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>",  // no token
           "<!DOCTYPE l [<!ENTITY a \"aaaa\"><!ENTITY b \"&a;&a;&a;&a;&a;&a;&a;&a;\">]>"
           "<ListBucketResult><Contents><Key>&b;&b;&b;",  // entity games, unterminated
       }) {
    EXPECT_EQ(ParseListObjectsV2(xml).status().code(), absl::StatusCode::kDataLoss) << xml;
  }
}

TEST(S3XmlTest, ErrorBodies) {
  auto e = ParseS3Error("<Error><Code>NoSuchKey</Code><Message>gone</Message></Error>");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->code, "NoSuchKey");
  EXPECT_EQ(e->message, "gone");
  EXPECT_FALSE(ParseS3Error("<html>502</html>").ok());
  EXPECT_FALSE(ParseS3Error("<Error><Message>m</Message></Error>").ok());
  EXPECT_FALSE(ParseS3Error("").ok());
}

TEST(ObjectUsageTest, RecordsAndAuditsRoundTripAndRefuseEverythingElse) {
  UsageRecord r{10, 4, 7, 123};
  EXPECT_EQ(ParseUsageRecord(FormatUsageRecord(r)), r);
  UsageAudit a;
  a.listed = 99;
  a.unix_ms = 5;
  a.base["h1"] = {3, 1};
  EXPECT_EQ(ParseUsageAudit(FormatUsageAudit(a)), a);
  for (const char* bad : {"", "kvstrata-object-usage 1\n",
                          "kvstrata-object-usage 2\nwritten 1\n"
                          "deleted 0\nheld 0\nunix_ms 0\n",
                          "kvstrata-object-usage 1\nwritten 01\n"
                          "deleted 0\nheld 0\nunix_ms 0\n",
                          "kvstrata-object-usage 1\nwritten 1\n"
                          "deleted 0\nheld -1\nunix_ms 0\n",
                          "kvstrata-object-usage 1\nwritten 1\n"
                          "deleted 0\nheld 0\nunix_ms 0"}) {
    EXPECT_FALSE(ParseUsageRecord(bad).has_value()) << bad;
  }
  EXPECT_FALSE(ParseUsageAudit("kvstrata-object-audit 1\nlisted 1\nunix_ms 1\nbase h 1\n"));
  EXPECT_FALSE(
      ParseUsageAudit("kvstrata-object-audit 1\nlisted 1\nunix_ms 1\nbase h 1 1\n"
                      "base h 1 1\n"));  // a holder twice
  EXPECT_FALSE(
      ParseUsageAudit("kvstrata-object-audit 1\nlisted 0\nunix_ms 1\nbase b 1 1\n"
                      "base a 1 1\n"));  // out of order (found by object_usage_fuzz)
}

TEST(ObjectUsageTest, TheUsageCountsChangesSinceTheAuditAndLiveClaims) {
  ObjectUsage::View v;
  v.audit.listed = 1000;
  v.audit.base["a"] = {500, 0};
  v.records["a"] = UsageRecord{700, 100, 50, 100'000};  // +200 - 100 since, holds 50
  v.records["b"] = UsageRecord{300, 0, 999, 0};  // new since the audit; dead: held not counted
  UsageRecord own{0, 0, 20, 100'000};
  EXPECT_EQ(v.Used("me", own, 100'000), 1000u + 100 + 50 + 300 + 20);
  EXPECT_EQ(v.Trimmer("me", 100'000), "a");  // b is dead
  EXPECT_EQ(v.Trimmer("0", 100'000), "0");
  v.expiry = absl::Seconds(200);  // a longer claim expiry: b is live
  EXPECT_EQ(v.Used("me", own, 100'000), 1000u + 100 + 50 + 300 + 999 + 20);
  EXPECT_EQ(v.Trimmer("me", 100'000), "a");
  v.expiry = absl::Milliseconds(1);  // a shorter one: a is dead too
  own.unix_ms = 100'002;
  EXPECT_EQ(v.Used("me", own, 100'002), 1000u + 100 + 300 + 20);
}

TEST(ObjectJournalTest, NamesAreReadBackAndEverythingElseRefused) {
  int64_t ms = 0;
  std::string holder;
  ASSERT_TRUE(ObjectJournal::ParseName("1764322262000-node1.42.0a1b2c3d", &ms, &holder));
  EXPECT_EQ(ms, 1764322262000);
  EXPECT_EQ(holder, "node1.42.0a1b2c3d");
  for (const char* bad : {"", "1764322262000", "1764322262000-", "176432226200-x",
                          "17643222620000-x", "176432226200x-x", "1764322262000_x",
                          "1764322262000-a/b", "1764322262000-a b", "-1764322262000-x"}) {
    EXPECT_FALSE(ObjectJournal::ParseName(bad, &ms, &holder)) << bad;
  }
}

TEST(ObjectJournalTest, WellFormedLinesAreReadAndOthersSkipped) {
  const std::string fp(32, 'a');
  std::vector<JournalEntry> seen;
  const size_t n = ObjectJournal::ParseText(
      fp + " 6b6579 69632\n" + fp + " 6b6579 -\n" +  // a write, a removal
          "garbage\n" + fp + " zz 1\n" + fp + " 6b6579 -5\n" + fp.substr(1) + " 6b 1\n" + fp +
          " 6b6579 1 extra\n\n" + fp + " 6b 7",  // the last without its newline
      [&](const JournalEntry& e) { seen.push_back(e); });
  ASSERT_EQ(n, 3u);
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0].key, "key");
  EXPECT_EQ(seen[0].file_bytes, 69632u);
  EXPECT_FALSE(seen[0].removed);
  EXPECT_TRUE(seen[1].removed);
  EXPECT_EQ(seen[2].key, "k");
  EXPECT_EQ(seen[2].file_bytes, 7u);
}

}  // namespace
}  // namespace kvstrata
