// ReadBlockFile and the miss reasons (declared in block_file_io.h).
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>

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

// A failed call on the file: `what` failed with `error`. ENOENT/ESTALE mean the file is
// gone (another node deleted or replaced it; over a network filesystem open(2) can succeed
// from a cache and a later fstat or read find it gone), so a miss, not an I/O error.
BlockReadResult ErrnoMiss(absl::string_view what, int error) {
  return Miss(internal::MissOfErrno(error), absl::StrCat(what, ": ", std::strerror(error)));
}

// The file behind `fd` was deleted (or, through a network filesystem, replaced or deleted
// elsewhere) while it was read: a short read then means "gone", not "truncated".
bool Vanished(int fd, const std::string& path) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return internal::MissOfErrno(errno) == BlockMiss::kAbsent;
  if (st.st_nlink == 0) return true;
  struct stat now;
  if (::stat(path.c_str(), &now) != 0) return internal::MissOfErrno(errno) == BlockMiss::kAbsent;
  return now.st_ino != st.st_ino || now.st_dev != st.st_dev;
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

namespace internal {
BlockMiss MissOfErrno(int error) {
  return error == ENOENT || error == ESTALE ? BlockMiss::kAbsent : BlockMiss::kIoError;
}
}  // namespace internal

bool ShouldQuarantine(BlockMiss miss) {
  return miss != BlockMiss::kAbsent && miss != BlockMiss::kIoError;
}

namespace {

struct FdCloser {
  int fd = -1;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};

// Opens `path` and verifies its header and size. A miss, or nullopt with `closer.fd` open
// and `*header` filled.
std::optional<BlockReadResult> OpenVerified(const std::string& path, absl::string_view fingerprint,
                                            absl::string_view key, FdCloser& closer,
                                            BlockHeader* header) {
  // O_NONBLOCK: opening a FIFO (or a device) someone left in the directory must not wait
  // for a writer; fstat below then turns it into a miss. No effect on regular files.
  closer.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (closer.fd < 0) return ErrnoMiss("open", errno);
  struct stat st;
  if (::fstat(closer.fd, &st) != 0) return ErrnoMiss("fstat", errno);
  if (!S_ISREG(st.st_mode)) return Miss(BlockMiss::kBadHeader, "not a regular file");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < kBlockHeaderBytes) {
    if (Vanished(closer.fd, path)) return Miss(BlockMiss::kAbsent, "deleted while read");
    return ShortFileMiss(closer.fd, size);
  }
  std::string header_bytes(kBlockHeaderBytes, '\0');
  const ssize_t n = ReadFullyAt(closer.fd, header_bytes.data(), kBlockHeaderBytes, 0);
  if (n < 0) return ErrnoMiss("header read", errno);
  if (n != static_cast<ssize_t>(kBlockHeaderBytes)) {
    if (Vanished(closer.fd, path)) return Miss(BlockMiss::kAbsent, "deleted while read");
    return Miss(BlockMiss::kTruncated, "file shrank while reading its header");
  }
  return CheckHeader(header_bytes, size, fingerprint, key, header);
}

// Reads the payload's whole 4 KiB pages with O_DIRECT straight into `dest` (which must be
// 4 KiB-aligned). The direct descriptor is opened through /proc/self/fd so that it is the
// file `fd` already verified, even if a writer renamed a new version over the path since.
// Returns the bytes read that way; 0 when O_DIRECT is not possible.
size_t ReadDirectPages(int fd, absl::Span<char> dest) {
  const size_t pages = dest.size() / kBlockFileAlignment * kBlockFileAlignment;
  if (pages == 0 || reinterpret_cast<uintptr_t>(dest.data()) % kBlockFileAlignment != 0) return 0;
  const std::string same_file = absl::StrCat("/proc/self/fd/", fd);
  FdCloser direct{::open(same_file.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT)};
  if (direct.fd < 0) return 0;
  const ssize_t n = ReadFullyAt(direct.fd, dest.data(), pages, kBlockHeaderBytes);
  return n == static_cast<ssize_t>(pages) ? pages : 0;
}

BlockReadResult ReadPayload(int fd, const std::string& path, const BlockHeader& header,
                            absl::Span<char> dest) {
  // The direct pages are re-read buffered if O_DIRECT failed part-way (0 returned).
  const size_t direct = ReadDirectPages(fd, dest);
  const size_t rest = dest.size() - direct;
  const ssize_t n = ReadFullyAt(fd, dest.data() + direct, rest, kBlockHeaderBytes + direct);
  if (n < 0) return ErrnoMiss("read", errno);
  if (static_cast<size_t>(n) != rest) {
    if (Vanished(fd, path)) return Miss(BlockMiss::kAbsent, "deleted while read");
    return Miss(BlockMiss::kTruncated, "file shrank while reading");
  }
  if (!PayloadChecksumOk(header, absl::string_view(dest.data(), dest.size()))) {
    return Miss(BlockMiss::kBadChecksum, "payload checksum mismatch");
  }
  BlockReadResult result;
  result.payload_bytes = header.payload_bytes;
  return result;
}

struct PagesDeleter {
  void operator()(char* p) const { std::free(p); }
};

// The whole file in one O_DIRECT preadv (header page, the payload's whole pages straight
// into `dest`, its last partial page into a staging page), then the same checks as the
// header-first path, when `dest` is 4 KiB-aligned and the file has the size a block of
// dest.size() bytes has: one I/O instead of a buffered header read, then the payload.
// nullopt when this path does not apply; the caller then reads the header first.
std::optional<BlockReadResult> ReadWholeDirect(const std::string& path,
                                               absl::string_view fingerprint, absl::string_view key,
                                               absl::Span<char> dest) {
  const size_t whole = dest.size() / kBlockFileAlignment * kBlockFileAlignment;
  const size_t tail = dest.size() - whole;
  if (whole == 0 || reinterpret_cast<uintptr_t>(dest.data()) % kBlockFileAlignment != 0) {
    return std::nullopt;
  }
  FdCloser closer{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT | O_NONBLOCK)};
  if (closer.fd < 0) {
    if (internal::MissOfErrno(errno) == BlockMiss::kAbsent) return ErrnoMiss("open", errno);
    return std::nullopt;  // No O_DIRECT here, or another error the other path reports.
  }
  struct stat st;
  if (::fstat(closer.fd, &st) != 0 || !S_ISREG(st.st_mode) ||
      static_cast<uint64_t>(st.st_size) != BlockFileBytes(dest.size())) {
    return std::nullopt;
  }
  void* raw = nullptr;
  if (::posix_memalign(&raw, kBlockFileAlignment, 2 * kBlockFileAlignment) != 0) {
    return std::nullopt;
  }
  std::unique_ptr<char, PagesDeleter> pages(static_cast<char*>(raw));
  iovec iov[3] = {{pages.get(), kBlockHeaderBytes},
                  {dest.data(), whole},
                  {pages.get() + kBlockFileAlignment, kBlockFileAlignment}};
  const int count = tail > 0 ? 3 : 2;
  const size_t total = kBlockHeaderBytes + whole + (tail > 0 ? kBlockFileAlignment : 0);
  ssize_t n;
  do {
    n = ::preadv(closer.fd, iov, count, 0);
  } while (n < 0 && errno == EINTR);
  if (n < 0 && errno == EINVAL) return std::nullopt;
  if (n < 0) return ErrnoMiss("read", errno);
  if (static_cast<size_t>(n) != total) return std::nullopt;  // Short: let the other path tell.
  BlockHeader header;
  if (auto miss = CheckHeader(absl::string_view(pages.get(), kBlockHeaderBytes),
                              static_cast<uint64_t>(st.st_size), fingerprint, key, &header)) {
    return *std::move(miss);
  }
  if (header.payload_bytes != dest.size()) {
    return Miss(BlockMiss::kBadHeader, absl::StrCat("payload of ", header.payload_bytes,
                                                    " bytes, expected ", dest.size()));
  }
  std::memcpy(dest.data() + whole, pages.get() + kBlockFileAlignment, tail);
  if (!PayloadChecksumOk(header, absl::string_view(dest.data(), dest.size()))) {
    return Miss(BlockMiss::kBadChecksum, "payload checksum mismatch");
  }
  BlockReadResult result;
  result.payload_bytes = header.payload_bytes;
  return result;
}

}  // namespace

BlockReadResult ReadBlockFileInto(const std::string& path, absl::string_view expected_fingerprint,
                                  absl::string_view expected_key, absl::Span<char> dest) {
  if (auto whole = ReadWholeDirect(path, expected_fingerprint, expected_key, dest)) {
    return *std::move(whole);
  }
  FdCloser closer;
  BlockHeader header;
  if (auto miss = OpenVerified(path, expected_fingerprint, expected_key, closer, &header)) {
    return *std::move(miss);
  }
  if (header.payload_bytes != dest.size()) {
    return Miss(BlockMiss::kBadHeader, absl::StrCat("payload of ", header.payload_bytes,
                                                    " bytes, expected ", dest.size()));
  }
  return ReadPayload(closer.fd, path, header, dest);
}

BlockReadResult ReadBlockFile(const std::string& path, absl::string_view expected_fingerprint,
                              absl::string_view expected_key, std::string* payload) {
  FdCloser closer;
  BlockHeader header;
  if (auto miss = OpenVerified(path, expected_fingerprint, expected_key, closer, &header)) {
    return *std::move(miss);
  }
  payload->resize(header.payload_bytes);
  return ReadPayload(closer.fd, path, header, absl::MakeSpan(*payload));
}

}  // namespace kvstrata
