#include "daemon/tiers/block_file_format.h"

#include <xxhash.h>
#if defined(KVSTRATA_XXH3_DISPATCH)
// XXH3_64bits becomes XXH3_64bits_dispatch: the same hash, with the widest vector unit the
// CPU has (AVX2/AVX-512) chosen at run time instead of the library's SSE2 build (2-4x
// faster on the payload checksums; bench/results/cpu-2026-11-21-tiers/NOTES.md).
#include <xxh_x86dispatch.h>
#endif

#include <cstring>

#include "absl/strings/str_cat.h"

namespace kvstrata {
namespace {

void PutU32(std::string& out, size_t offset, uint32_t value) {
  for (int i = 0; i < 4; ++i) out[offset + i] = static_cast<char>((value >> (8 * i)) & 0xff);
}

void PutU64(std::string& out, size_t offset, uint64_t value) {
  for (int i = 0; i < 8; ++i) out[offset + i] = static_cast<char>((value >> (8 * i)) & 0xff);
}

uint64_t GetLe(absl::string_view in, size_t offset, int bytes) {
  uint64_t value = 0;
  for (int i = bytes - 1; i >= 0; --i) {
    value = (value << 8) | static_cast<uint8_t>(in[offset + i]);
  }
  return value;
}

// XXH3-64 of the whole header with the header-checksum field read as zero.
uint64_t HeaderChecksum(absl::string_view header) {
  std::string copy(header.substr(0, kBlockHeaderBytes));
  PutU64(copy, kOffHeaderChecksum, 0);
  return XXH3_64bits(copy.data(), copy.size());
}

bool AllZero(absl::string_view bytes) {
  for (char c : bytes) {
    if (c != 0) return false;
  }
  return true;
}

absl::Status ValidateKey(absl::string_view key) {
  if (key.empty() || key.size() > kMaxBlockKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("block key must be 1..", kMaxBlockKeyBytes, " bytes, got ", key.size()));
  }
  return absl::OkStatus();
}

absl::Status CheckFixedFields(absl::string_view bytes) {
  if (bytes.size() < kBlockHeaderBytes) {
    return absl::DataLossError(absl::StrCat("block header truncated: ", bytes.size(), " bytes"));
  }
  if (std::memcmp(bytes.data() + kOffMagic, kBlockFileMagic, sizeof(kBlockFileMagic)) != 0) {
    return absl::DataLossError("bad block file magic");
  }
  const uint64_t version = GetLe(bytes, kOffVersion, 4);
  if (version != kBlockFileFormatVersion) {
    return absl::DataLossError(absl::StrCat("unsupported block file format version ", version));
  }
  const uint64_t header_bytes = GetLe(bytes, kOffHeaderBytes, 4);
  if (header_bytes != kBlockHeaderBytes) {
    return absl::DataLossError(absl::StrCat("bad block header size ", header_bytes));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::array<uint8_t, 16>> ParseFingerprint(absl::string_view hex) {
  std::array<uint8_t, 16> out{};
  if (hex.size() != 32) {
    return absl::InvalidArgumentError("namespace fingerprint must be 32 lowercase hex chars");
  }
  for (size_t i = 0; i < 32; ++i) {
    const char c = hex[i];
    int nibble = -1;
    if (c >= '0' && c <= '9') nibble = c - '0';
    if (c >= 'a' && c <= 'f') nibble = c - 'a' + 10;
    if (nibble < 0) {
      return absl::InvalidArgumentError("namespace fingerprint must be 32 lowercase hex chars");
    }
    out[i / 2] = static_cast<uint8_t>((out[i / 2] << 4) | nibble);
  }
  return out;
}

std::string FingerprintHex(const std::array<uint8_t, 16>& binary) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(32);
  for (uint8_t b : binary) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 0xf]);
  }
  return out;
}

uint64_t BlockFileBytes(uint64_t payload_bytes) {
  const uint64_t padded =
      (payload_bytes + kBlockFileAlignment - 1) / kBlockFileAlignment * kBlockFileAlignment;
  return kBlockHeaderBytes + padded;
}

absl::StatusOr<BlockHeader> MakeBlockHeader(absl::string_view fingerprint_hex,
                                            absl::string_view key, absl::string_view payload,
                                            uint64_t write_time_ms) {
  absl::StatusOr<std::array<uint8_t, 16>> fingerprint = ParseFingerprint(fingerprint_hex);
  if (!fingerprint.ok()) return fingerprint.status();
  if (absl::Status status = ValidateKey(key); !status.ok()) return status;
  if (payload.size() > kMaxBlockFilePayloadBytes) {
    return absl::InvalidArgumentError(absl::StrCat("payload too large: ", payload.size()));
  }
  BlockHeader header;
  header.fingerprint = *fingerprint;
  header.key = std::string(key);
  header.payload_bytes = payload.size();
  header.payload_checksum = XXH3_64bits(payload.data(), payload.size());
  header.write_time_ms = write_time_ms;
  return header;
}

std::string EncodeBlockHeader(const BlockHeader& header) {
  std::string out(kBlockHeaderBytes, '\0');
  std::memcpy(out.data() + kOffMagic, kBlockFileMagic, sizeof(kBlockFileMagic));
  PutU32(out, kOffVersion, kBlockFileFormatVersion);
  PutU32(out, kOffHeaderBytes, kBlockHeaderBytes);
  std::memcpy(out.data() + kOffFingerprint, header.fingerprint.data(), 16);
  out[kOffKeyLength] = static_cast<char>(header.key.size());
  std::memcpy(out.data() + kOffKey, header.key.data(), header.key.size());
  PutU64(out, kOffPayloadBytes, header.payload_bytes);
  PutU64(out, kOffPayloadChecksum, header.payload_checksum);
  PutU64(out, kOffWriteTimeMs, header.write_time_ms);
  PutU64(out, kOffHeaderChecksum, HeaderChecksum(out));
  return out;
}

absl::StatusOr<BlockHeader> DecodeBlockHeader(absl::string_view bytes) {
  if (absl::Status status = CheckFixedFields(bytes); !status.ok()) return status;
  if (GetLe(bytes, kOffHeaderChecksum, 8) != HeaderChecksum(bytes)) {
    return absl::DataLossError("block header checksum mismatch");
  }
  const size_t key_length = static_cast<uint8_t>(bytes[kOffKeyLength]);
  if (key_length == 0 || key_length > kMaxBlockKeyBytes) {
    return absl::DataLossError(absl::StrCat("bad block key length ", key_length));
  }
  if (!AllZero(bytes.substr(kOffKey + key_length, kOffPayloadBytes - kOffKey - key_length)) ||
      !AllZero(bytes.substr(kOffWriteTimeMs + 8, kBlockHeaderBytes - kOffWriteTimeMs - 8))) {
    return absl::DataLossError("block header reserved bytes are not zero");
  }
  BlockHeader header;
  std::memcpy(header.fingerprint.data(), bytes.data() + kOffFingerprint, 16);
  header.key = std::string(bytes.substr(kOffKey, key_length));
  header.payload_bytes = GetLe(bytes, kOffPayloadBytes, 8);
  header.payload_checksum = GetLe(bytes, kOffPayloadChecksum, 8);
  header.write_time_ms = GetLe(bytes, kOffWriteTimeMs, 8);
  if (header.payload_bytes > kMaxBlockFilePayloadBytes) {
    return absl::DataLossError(absl::StrCat("bad block payload length ", header.payload_bytes));
  }
  return header;
}

absl::StatusOr<BlockHeader> DecodeBlockHeader(absl::string_view bytes,
                                              absl::string_view expected_fingerprint_hex,
                                              absl::string_view expected_key) {
  absl::StatusOr<BlockHeader> header = DecodeBlockHeader(bytes);
  if (!header.ok()) return header;
  if (FingerprintHex(header->fingerprint) != expected_fingerprint_hex) {
    return absl::FailedPreconditionError(
        absl::StrCat("block belongs to namespace ", FingerprintHex(header->fingerprint)));
  }
  if (header->key != expected_key) {
    return absl::FailedPreconditionError("block belongs to another key");
  }
  return header;
}

bool PayloadChecksumOk(const BlockHeader& header, absl::string_view payload) {
  return payload.size() == header.payload_bytes &&
         XXH3_64bits(payload.data(), payload.size()) == header.payload_checksum;
}

}  // namespace kvstrata
