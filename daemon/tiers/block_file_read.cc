// ReadBlockFile and the miss reasons (declared in block_file_io.h).
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "daemon/tiers/block_file_io.h"

namespace kvstrata {
namespace {

BlockReadResult Miss(BlockMiss miss, std::string detail) {
  BlockReadResult result;
  result.miss = miss;
  result.detail = std::move(detail);
  return result;
}

// Reads exactly `size` bytes at `offset`. Returns the bytes read (less at end of file) or
// -1 with errno set.
ssize_t ReadFullyAt(int fd, char* out, size_t size, uint64_t offset) {
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::pread(fd, out + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  return static_cast<ssize_t>(done);
}

// A file shorter than a header: truncated if it starts like a block file, else foreign.
BlockReadResult ShortFileMiss(int fd, uint64_t size) {
  char magic[sizeof(kBlockFileMagic)];
  if (size >= sizeof(magic) && ReadFullyAt(fd, magic, sizeof(magic), 0) == sizeof(magic) &&
      std::memcmp(magic, kBlockFileMagic, sizeof(magic)) != 0) {
    return Miss(BlockMiss::kBadHeader, "bad block file magic");
  }
  return Miss(BlockMiss::kTruncated, absl::StrCat("file of ", size, " bytes has no full header"));
}

// Decodes and checks the header: identity first, then the file size it implies.
std::optional<BlockReadResult> CheckHeader(absl::string_view bytes, uint64_t file_size,
                                           absl::string_view fingerprint, absl::string_view key,
                                           BlockHeader* header) {
  absl::StatusOr<BlockHeader> decoded = DecodeBlockHeader(bytes);
  if (!decoded.ok()) return Miss(BlockMiss::kBadHeader, std::string(decoded.status().message()));
  if (FingerprintHex(decoded->fingerprint) != fingerprint) {
    return Miss(BlockMiss::kWrongNamespace,
                absl::StrCat("block of namespace ", FingerprintHex(decoded->fingerprint)));
  }
  if (decoded->key != key) return Miss(BlockMiss::kWrongKey, "block of another key");
  const uint64_t expected = BlockFileBytes(decoded->payload_bytes);
  if (file_size < expected) {
    return Miss(BlockMiss::kTruncated,
                absl::StrCat("file has ", file_size, " bytes, header says ", expected));
  }
  if (file_size > expected) {
    return Miss(BlockMiss::kBadHeader,
                absl::StrCat("file has ", file_size, " bytes, header says ", expected));
  }
  *header = *std::move(decoded);
  return std::nullopt;
}

}  // namespace

absl::string_view BlockMissName(BlockMiss miss) {
  switch (miss) {
    case BlockMiss::kAbsent:
      return "absent";
    case BlockMiss::kTruncated:
      return "truncated";
    case BlockMiss::kBadHeader:
      return "bad_header";
    case BlockMiss::kWrongNamespace:
      return "wrong_namespace";
    case BlockMiss::kWrongKey:
      return "wrong_key";
    case BlockMiss::kBadChecksum:
      return "bad_checksum";
    case BlockMiss::kIoError:
      return "io_error";
  }
  return "unknown";
}

bool ShouldQuarantine(BlockMiss miss) {
  return miss != BlockMiss::kAbsent && miss != BlockMiss::kIoError;
}

BlockReadResult ReadBlockFile(const std::string& path, absl::string_view expected_fingerprint,
                              absl::string_view expected_key, std::string* payload) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    return Miss(error == ENOENT ? BlockMiss::kAbsent : BlockMiss::kIoError,
                absl::StrCat("open: ", std::strerror(error)));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st;
  if (::fstat(fd, &st) != 0) return Miss(BlockMiss::kIoError, "fstat failed");
  if (!S_ISREG(st.st_mode)) return Miss(BlockMiss::kBadHeader, "not a regular file");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < kBlockHeaderBytes) return ShortFileMiss(fd, size);
  std::string header_bytes(kBlockHeaderBytes, '\0');
  if (ReadFullyAt(fd, header_bytes.data(), kBlockHeaderBytes, 0) != kBlockHeaderBytes) {
    return Miss(BlockMiss::kIoError, absl::StrCat("header read: ", std::strerror(errno)));
  }
  BlockHeader header;
  if (auto miss = CheckHeader(header_bytes, size, expected_fingerprint, expected_key, &header)) {
    return *std::move(miss);
  }
  payload->resize(header.payload_bytes);
  const ssize_t n = ReadFullyAt(fd, payload->data(), payload->size(), kBlockHeaderBytes);
  if (n < 0) return Miss(BlockMiss::kIoError, absl::StrCat("read: ", std::strerror(errno)));
  if (static_cast<uint64_t>(n) != header.payload_bytes) {
    return Miss(BlockMiss::kTruncated, "file shrank while reading");
  }
  if (!PayloadChecksumOk(header, *payload)) {
    return Miss(BlockMiss::kBadChecksum, "payload checksum mismatch");
  }
  BlockReadResult result;
  result.payload_bytes = header.payload_bytes;
  return result;
}

}  // namespace kvstrata
