#include "daemon/common/byte_size.h"

#include <gtest/gtest.h>

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

TEST(ByteSizeTest, FormatsWithTheLargestExactUnit) {
  EXPECT_EQ(FormatByteSize(4ULL << 30), "4GiB");
  EXPECT_EQ(FormatByteSize(1536ULL << 20), "1536MiB");
  EXPECT_EQ(FormatByteSize(1000), "1000B");
  EXPECT_EQ(FormatByteSize(0), "0B");
}

}  // namespace
}  // namespace kvstrata
