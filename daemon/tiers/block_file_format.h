// The header of one L2/L3 block file (see docs/on-disk-format.md). A block file is a
// fixed 4096-byte header followed by the payload at offset 4096, zero-padded to a multiple
// of 4096 so that every read and write can use O_DIRECT. All integers are little-endian.
// Value types and free functions; thread-compatible.
#ifndef KVSTRATA_DAEMON_TIERS_BLOCK_FILE_FORMAT_H_
#define KVSTRATA_DAEMON_TIERS_BLOCK_FILE_FORMAT_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kvstrata {

inline constexpr char kBlockFileMagic[8] = {'K', 'V', 'S', 'T', 'R', 'A', 'T', 'A'};
inline constexpr uint32_t kBlockFileFormatVersion = 1;
inline constexpr uint32_t kBlockHeaderBytes = 4096;
inline constexpr uint32_t kBlockFileAlignment = 4096;
inline constexpr size_t kMaxBlockKeyBytes = 32;
// Largest payload a block file may declare (4 GiB); larger lengths are a bad header.
inline constexpr uint64_t kMaxBlockFilePayloadBytes = 4ULL << 30;

// Field offsets inside the header (documented in docs/on-disk-format.md).
inline constexpr size_t kOffMagic = 0;
inline constexpr size_t kOffVersion = 8;
inline constexpr size_t kOffHeaderBytes = 12;
inline constexpr size_t kOffFingerprint = 16;
inline constexpr size_t kOffKeyLength = 32;
inline constexpr size_t kOffKey = 33;
inline constexpr size_t kOffPayloadBytes = 72;  // 65..71 reserved, zero.
inline constexpr size_t kOffPayloadChecksum = 80;
inline constexpr size_t kOffHeaderChecksum = 88;
inline constexpr size_t kOffWriteTimeMs = 96;

struct BlockHeader {
  std::array<uint8_t, 16> fingerprint{};  // Binary form of the 32-hex namespace fingerprint.
  std::string key;                        // 1..32 bytes.
  uint64_t payload_bytes = 0;
  uint64_t payload_checksum = 0;  // XXH3-64 of the payload bytes.
  uint64_t write_time_ms = 0;     // Unix milliseconds; informational.
};

// Builds a header for `payload` (computes its checksum). INVALID_ARGUMENT for a
// fingerprint that is not 32 lowercase hex or a key outside 1..32 bytes.
absl::StatusOr<BlockHeader> MakeBlockHeader(absl::string_view fingerprint_hex,
                                            absl::string_view key, absl::string_view payload,
                                            uint64_t write_time_ms);

// Exactly kBlockHeaderBytes bytes. REQUIRES: header came from MakeBlockHeader (valid key).
std::string EncodeBlockHeader(const BlockHeader& header);

// Structural checks only: size, magic, version, header size, key length, reserved bytes,
// payload length bound, header checksum. DATA_LOSS naming the first failed check.
absl::StatusOr<BlockHeader> DecodeBlockHeader(absl::string_view bytes);

// DecodeBlockHeader plus identity: FAILED_PRECONDITION when the header belongs to another
// namespace or another key (the message says which).
absl::StatusOr<BlockHeader> DecodeBlockHeader(absl::string_view bytes,
                                              absl::string_view expected_fingerprint_hex,
                                              absl::string_view expected_key);

// True when `payload` has the header's length and checksum.
bool PayloadChecksumOk(const BlockHeader& header, absl::string_view payload);

// Fingerprint text <-> binary. ParseFingerprint: INVALID_ARGUMENT unless 32 lowercase hex.
absl::StatusOr<std::array<uint8_t, 16>> ParseFingerprint(absl::string_view hex);
std::string FingerprintHex(const std::array<uint8_t, 16>& binary);

// Bytes of the whole file: header + payload rounded up to kBlockFileAlignment.
uint64_t BlockFileBytes(uint64_t payload_bytes);

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_TIERS_BLOCK_FILE_FORMAT_H_
