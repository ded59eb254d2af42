#include "daemon/tiers/block_file_format.h"

#include <gtest/gtest.h>

#include <string>

#include "absl/strings/str_cat.h"

namespace kvstrata {
namespace {

constexpr char kFp[] = "0123456789abcdef0123456789abcdef";

std::string Encoded(absl::string_view payload = "payload") {
  return EncodeBlockHeader(*MakeBlockHeader(kFp, "key-1", payload, 1234));
}

TEST(BlockFileFormatTest, EncodesAFixedSizeHeaderThatRoundTrips) {
  const std::string bytes = Encoded("hello");
  ASSERT_EQ(bytes.size(), kBlockHeaderBytes);
  EXPECT_EQ(bytes.substr(0, 8), "KVSTRATA");
  absl::StatusOr<BlockHeader> header = DecodeBlockHeader(bytes, kFp, "key-1");
  ASSERT_TRUE(header.ok()) << header.status();
  EXPECT_EQ(FingerprintHex(header->fingerprint), kFp);
  EXPECT_EQ(header->key, "key-1");
  EXPECT_EQ(header->payload_bytes, 5u);
  EXPECT_EQ(header->write_time_ms, 1234u);
  EXPECT_TRUE(PayloadChecksumOk(*header, "hello"));
  EXPECT_FALSE(PayloadChecksumOk(*header, "hellO"));
  EXPECT_FALSE(PayloadChecksumOk(*header, "hell"));
}

TEST(BlockFileFormatTest, FieldsAreLittleEndianAtDocumentedOffsets) {
  const std::string bytes = Encoded("hello");
  EXPECT_EQ(bytes[kOffVersion], 1);
  EXPECT_EQ(static_cast<uint8_t>(bytes[kOffHeaderBytes + 1]), 0x10);  // 4096 = 0x1000.
  EXPECT_EQ(static_cast<uint8_t>(bytes[kOffFingerprint]), 0x01);
  EXPECT_EQ(bytes[kOffKeyLength], 5);
  EXPECT_EQ(bytes.substr(kOffKey, 5), "key-1");
  EXPECT_EQ(bytes[kOffPayloadBytes], 5);
  EXPECT_EQ(static_cast<uint8_t>(bytes[kOffWriteTimeMs]), 1234 & 0xff);
}

TEST(BlockFileFormatTest, RejectsBadArgumentsWhenBuilding) {
  EXPECT_EQ(MakeBlockHeader("ABCDEF0123456789abcdef0123456789", "k", "", 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeBlockHeader("abc", "k", "", 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeBlockHeader(kFp, "", "", 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeBlockHeader(kFp, std::string(33, 'k'), "", 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(MakeBlockHeader(kFp, std::string(32, 'k'), "", 0).ok());
}

TEST(BlockFileFormatTest, EveryStructuralCheckIsDataLoss) {
  auto expect_loss = [](std::string bytes, absl::string_view why) {
    EXPECT_EQ(DecodeBlockHeader(bytes).status().code(), absl::StatusCode::kDataLoss) << why;
  };
  expect_loss(Encoded().substr(0, 100), "short");
  std::string bytes = Encoded();
  bytes[0] = 'X';
  expect_loss(bytes, "magic");
  bytes = Encoded();
  bytes[kOffVersion] = 2;
  expect_loss(bytes, "version");
  bytes = Encoded();
  bytes[kOffHeaderBytes] = 1;
  expect_loss(bytes, "header bytes");
  for (size_t offset : {kOffKeyLength, kOffKey, kOffPayloadBytes, kOffPayloadChecksum,
                        kOffHeaderChecksum, kOffWriteTimeMs, size_t{70}, size_t{4095}}) {
    bytes = Encoded();
    bytes[offset] ^= 0x40;
    expect_loss(bytes, absl::StrCat("flip at ", offset));
  }
}

TEST(BlockFileFormatTest, IdentityMismatchIsFailedPrecondition) {
  const std::string bytes = Encoded();
  EXPECT_EQ(DecodeBlockHeader(bytes, "ffffffffffffffffffffffffffffffff", "key-1").status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(DecodeBlockHeader(bytes, kFp, "key-2").status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(BlockFileFormatTest, FileSizeIsHeaderPlusAlignedPayload) {
  EXPECT_EQ(BlockFileBytes(0), 4096u);
  EXPECT_EQ(BlockFileBytes(1), 8192u);
  EXPECT_EQ(BlockFileBytes(4096), 8192u);
  EXPECT_EQ(BlockFileBytes(4097), 12288u);
}

}  // namespace
}  // namespace kvstrata
