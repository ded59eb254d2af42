// Job frames: headers survive encode/decode, sit where docs/wire-protocol.md says, and are
// little-endian.
#include "daemon/rpc/fast_path/job_wire.h"

#include <gtest/gtest.h>

#include <cstring>

namespace kvstrata::job_wire {
namespace {

TEST(JobWireTest, RequestHeaderRoundTripsAtTheDocumentedOffsets) {
  RequestHeader h;
  h.kind = kKindStore;
  h.session_id = 0x1122334455667788ULL;
  h.namespace_id = 7;
  h.key_count = 512;
  h.key_bytes = 32;
  h.event = 3;
  h.registration_id = 0xABCDEFULL;
  h.lease_id = 99;
  char bytes[kRequestHeaderBytes];
  EncodeRequestHeader(h, bytes);
  EXPECT_EQ(std::memcmp(bytes, "KVSJ", 4), 0);
  EXPECT_EQ(bytes[6], 1);                                 // kind, low byte
  EXPECT_EQ(static_cast<unsigned char>(bytes[8]), 0x88);  // session_id, lowest byte
  uint32_t key_count = 0;
  std::memcpy(&key_count, bytes + 20, 4);
  EXPECT_EQ(key_count, 512u);  // On the little-endian hosts we build for.
  uint64_t lease = 0;
  std::memcpy(&lease, bytes + 40, 8);
  EXPECT_EQ(lease, 99u);
  RequestHeader back = DecodeRequestHeader(bytes);
  EXPECT_EQ(back.magic, kMagic);
  EXPECT_EQ(back.version, kVersion);
  EXPECT_EQ(back.kind, kKindStore);
  EXPECT_EQ(back.session_id, h.session_id);
  EXPECT_EQ(back.namespace_id, 7u);
  EXPECT_EQ(back.key_count, 512u);
  EXPECT_EQ(back.key_bytes, 32u);
  EXPECT_EQ(back.event, 3u);
  EXPECT_EQ(back.registration_id, 0xABCDEFULL);
  EXPECT_EQ(back.lease_id, 99u);
}

TEST(JobWireTest, ResponseHeaderRoundTrips) {
  ResponseHeader h;
  h.status = 5;
  h.job_id = 1ULL << 40;
  h.message_bytes = 12;
  char bytes[kResponseHeaderBytes];
  EncodeResponseHeader(h, bytes);
  EXPECT_EQ(std::memcmp(bytes, "KVSJ", 4), 0);
  ResponseHeader back = DecodeResponseHeader(bytes);
  EXPECT_EQ(back.status, 5u);
  EXPECT_EQ(back.job_id, 1ULL << 40);
  EXPECT_EQ(back.message_bytes, 12u);
}

TEST(JobWireTest, CompletionHeaderRoundTripsAtTheDocumentedOffsets) {
  CompletionHeader h;
  h.kind = kKindStore;
  h.session_id = 0x0102030405060708ULL;
  h.job_id = 77;
  h.elapsed_us = 123456;
  h.failed_count = 3;
  h.error_bytes = 9;
  char bytes[kCompletionHeaderBytes];
  EncodeCompletionHeader(h, bytes);
  EXPECT_EQ(std::memcmp(bytes, "KVSC", 4), 0);
  EXPECT_EQ(bytes[4], 1);  // kind, low byte
  EXPECT_EQ(bytes[8], 8);  // session_id, lowest byte
  uint64_t job = 0;
  std::memcpy(&job, bytes + 16, 8);
  EXPECT_EQ(job, 77u);
  uint32_t error_bytes = 0;
  std::memcpy(&error_bytes, bytes + 36, 4);
  EXPECT_EQ(error_bytes, 9u);
  CompletionHeader back = DecodeCompletionHeader(bytes);
  EXPECT_EQ(back.magic, kCompletionMagic);
  EXPECT_EQ(back.kind, kKindStore);
  EXPECT_EQ(back.session_id, h.session_id);
  EXPECT_EQ(back.job_id, 77u);
  EXPECT_EQ(back.elapsed_us, 123456u);
  EXPECT_EQ(back.failed_count, 3u);
  EXPECT_EQ(back.error_bytes, 9u);
}

}  // namespace
}  // namespace kvstrata::job_wire
