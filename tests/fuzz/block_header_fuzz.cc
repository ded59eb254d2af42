// libFuzzer target: the L2/L3 block-file header reader (daemon/tiers/block_file_format.h)
// on any bytes. A header that decodes must encode back to the same bytes, and the payload
// check must run on whatever follows it.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "daemon/tiers/block_file_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<kvstrata::BlockHeader> header = kvstrata::DecodeBlockHeader(bytes);
  if (!header.ok()) return 0;
  if (kvstrata::EncodeBlockHeader(*header) != bytes.substr(0, kvstrata::kBlockHeaderBytes)) {
    __builtin_trap();  // Decoded fields that do not describe the bytes.
  }
  (void)kvstrata::PayloadChecksumOk(*header, bytes.substr(kvstrata::kBlockHeaderBytes));
  (void)kvstrata::DecodeBlockHeader(bytes, kvstrata::FingerprintHex(header->fingerprint),
                                    header->key);
  return 0;
}
