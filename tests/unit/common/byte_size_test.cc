#include "daemon/common/byte_size.h"

#include <gtest/gtest.h>

#include <string>

namespace kvstrata {
namespace {

TEST(ByteSizeTest, ParsesBinaryAndDecimalUnits) {
  EXPECT_EQ(*ParseByteSize("4GiB"), 4ULL << 30);
  EXPECT_EQ(*ParseByteSize("512MiB"), 512ULL << 20);
  EXPECT_EQ(*ParseByteSize(" 64 KiB "), 64ULL << 10);
  EXPECT_EQ(*ParseByteSize("1TiB"), 1ULL << 40);
  EXPECT_EQ(*ParseByteSize("100MB"), 100'000'000ULL);
  EXPECT_EQ(*ParseByteSize("4096"), 4096ULL);
  EXPECT_EQ(*ParseByteSize("7B"), 7ULL);
}

TEST(ByteSizeTest, RejectsMalformedSizes) {
  for (const char* bad : {"", "GiB", "-1GiB", "1.5GiB", "3XB", "99999999999999999999", "4 G"}) {
    EXPECT_EQ(ParseByteSize(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(ParseByteSize("20000000TiB").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ByteSizeTest, UnknownUnitListsEveryAcceptedUnit) {
  absl::StatusOr<uint64_t> bad = ParseByteSize("3XB");
  ASSERT_FALSE(bad.ok());
  std::string message(bad.status().message());
  EXPECT_NE(message.find("'3XB'"), std::string::npos) << message;
  for (const char* unit : {"B", "KiB", "MiB", "GiB", "TiB", "KB", "MB", "GB", "TB"}) {
    EXPECT_NE(message.find(std::string(" ") + unit), std::string::npos) << unit << ": " << message;
  }
  EXPECT_EQ(*ParseByteSize("2GB"), 2'000'000'000ULL);
}

TEST(ByteSizeTest, HumanSizesHaveOneDecimal) {
  EXPECT_EQ(HumanByteSize(4ULL << 30), "4.0 GiB");
  EXPECT_EQ(HumanByteSize(1536ULL << 20), "1.5 GiB");
  EXPECT_EQ(HumanByteSize(64ULL << 20), "64.0 MiB");
  EXPECT_EQ(HumanByteSize(1000), "1000 B");
  EXPECT_EQ(HumanByteSize(2ULL << 40), "2.0 TiB");
}

TEST(ByteSizeTest, FormatsWithTheLargestExactUnit) {
  EXPECT_EQ(FormatByteSize(4ULL << 30), "4GiB");
  EXPECT_EQ(FormatByteSize(1536ULL << 20), "1536MiB");
  EXPECT_EQ(FormatByteSize(1000), "1000B");
  EXPECT_EQ(FormatByteSize(0), "0B");
}

}  // namespace
}  // namespace kvstrata
