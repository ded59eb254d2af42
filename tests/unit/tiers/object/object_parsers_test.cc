// What the object tier reads from outside: credentials files, S3 XML bodies, usage records.
// Every class of bad input is refused, never half-read.
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
}

}  // namespace
}  // namespace kvstrata
