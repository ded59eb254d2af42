// Reading and writing one L2/L3 block file (format: block_file_format.h; protocol:
// docs/on-disk-format.md).
//
// Writes go to `<path>.tmp.<pid>.<random>` and are renamed over `path`, so a reader sees
// either no file, an old complete file or a new complete file, never a torn one; of
// concurrent writers of one key the last rename wins. O_DIRECT is used where the
// filesystem accepts it; an EINVAL from open(2) or write(2) with O_DIRECT falls back to
// buffered I/O. A payload in 4 KiB-aligned memory (an L1 slot) is written without a copy;
// a ReadBlockFileInto an aligned destination reads header and payload in one O_DIRECT
// read. Reads verify everything; a bad file is a miss, never bad data, and the caller
// hands it to Quarantine(). All functions are thread-safe (they share no state;
// concurrent calls on one path are the case the protocol is built for).
#ifndef KVSTRATA_DAEMON_TIERS_BLOCK_FILE_IO_H_
#define KVSTRATA_DAEMON_TIERS_BLOCK_FILE_IO_H_

#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "daemon/tiers/block_file_format.h"

namespace kvstrata {

enum class FsyncPolicy {
  kNone,        // Leave durability to the page cache (a crash may lose recent blocks).
  kFile,        // fdatasync the temp file before the rename.
  kFileAndDir,  // ... and fsync the directory after it (the rename itself is durable).
};

struct BlockWriteOptions {
  FsyncPolicy fsync = FsyncPolicy::kFileAndDir;
  bool try_direct_io = true;
};

struct BlockWriteInfo {
  bool direct_io = false;  // True when every byte went through O_DIRECT.
};

// Writes header + payload atomically at `path`, creating missing parent directories.
// REQUIRES: header was built for `payload` (MakeBlockHeader). Errors: RESOURCE_EXHAUSTED
// for ENOSPC/EDQUOT/EFBIG, UNAVAILABLE for EIO, ABORTED ("directory race") when the
// parent directory keeps answering ENOENT or ESTALE (MakeDirectories) or is replaced through
// another mount (ESTALE), others per ErrnoToStatus. On any error no
// temp file is left behind and an existing file at `path` is untouched.
absl::StatusOr<BlockWriteInfo> WriteBlockFile(const std::string& path, const BlockHeader& header,
                                              absl::string_view payload,
                                              const BlockWriteOptions& options = {});

// Why a read is a miss. Every reason but kAbsent and kIoError means the file is bad.
enum class BlockMiss {
  kAbsent,          // No file (ENOENT/ESTALE at open, fstat or read; deleted mid-read).
  kTruncated,       // Shorter than a header, or than the header says.
  kBadHeader,       // Not a block file (magic, version, lengths, header checksum, size).
  kWrongNamespace,  // A valid block of another namespace.
  kWrongKey,        // A valid block of another key.
  kBadChecksum,     // The payload does not match its checksum.
  kIoError,         // The read itself failed (EIO, EACCES, ...): the file may be fine.
};

absl::string_view BlockMissName(BlockMiss miss);
// True for the reasons that mean the file itself is bad.
bool ShouldQuarantine(BlockMiss miss);

struct BlockReadResult {
  std::optional<uint64_t> payload_bytes;  // Set on a hit; `payload` then holds the bytes.
  BlockMiss miss = BlockMiss::kAbsent;    // Meaningful only when payload_bytes is empty.
  std::string detail;                     // Human-readable reason of a miss.
  bool hit() const { return payload_bytes.has_value(); }
};

// Reads and verifies the block at `path`. On a hit `*payload` holds exactly the payload;
// on a miss its contents are unspecified.
BlockReadResult ReadBlockFile(const std::string& path, absl::string_view expected_fingerprint,
                              absl::string_view expected_key, std::string* payload);

// Same checks as ReadBlockFile, but the payload goes straight into `dest` (one copy, or
// none: whole 4 KiB pages are read with O_DIRECT when `dest` is 4 KiB-aligned and the
// filesystem allows it). A payload whose length is not `dest.size()` is a miss (kBadHeader:
// the file belongs to another layout). On a miss `dest` holds unspecified bytes.
BlockReadResult ReadBlockFileInto(const std::string& path, absl::string_view expected_fingerprint,
                                  absl::string_view expected_key, absl::Span<char> dest);

// Moves `path` (which must lie under `root`) to `<root>/.quarantine/<relative path with
// '/' as '%'>.<unix ms>.<random>` and returns the new path. Never deletes. NOT_FOUND when
// the file is already gone, INVALID_ARGUMENT when it is not under `root`.
absl::StatusOr<std::string> Quarantine(const std::string& path, const std::string& root);

// errno -> status: ENOSPC, EDQUOT, EFBIG -> RESOURCE_EXHAUSTED; EIO -> UNAVAILABLE;
// ENOENT -> NOT_FOUND; ESTALE (replaced through another mount of a network filesystem) ->
// ABORTED; EACCES, EPERM, EROFS -> PERMISSION_DENIED; else INTERNAL.
absl::Status ErrnoToStatus(int error, absl::string_view what);

// mkdir -p. Existing directories are fine: EEXIST is success once a stat finds a directory.
// ENOENT or ESTALE from a mkdir or that stat (another client of a network filesystem is
// creating or replacing a directory on the way) retries the whole pass, backing off 1, 4,
// 16, 64, 256 and 1000 ms; past those, ABORTED ("directory race"): the write that needed it
// is dropped, and the tier does not count it as failing.
absl::Status MakeDirectories(const std::string& dir);

namespace internal {
// The calls MakeDirectories and WriteBlockFile's open go through, with the usual -1 and
// errno on failure: a test replaces them to inject a network filesystem's races.
struct DirectoryCalls {
  int (*mkdir)(const char* path, mode_t mode);
  int (*stat)(const char* path, struct stat* st);
  int (*open)(const char* path, int flags, mode_t mode);
  void (*sleep_ms)(int ms);
};
const DirectoryCalls& CurrentDirectoryCalls();
// Tests only: `calls` (which must outlive its use) until the next call; nullptr restores
// the real ones.
void SetDirectoryCallsForTest(const DirectoryCalls* calls);
// The miss a failed open/fstat/read with `error` is: kAbsent for ENOENT and ESTALE (the
// file is gone: deleted, or replaced through another mount of a network filesystem),
// kIoError otherwise.
BlockMiss MissOfErrno(int error);
// pwrite of all `size` bytes at `offset`; on EINVAL while `*direct` is true it clears
// O_DIRECT on `fd`, sets `*direct` to false and retries buffered. Exposed for tests.
absl::Status WriteFullyAt(int fd, const char* data, size_t size, uint64_t offset, bool* direct);
// The same for `count` segments written from `offset` on with pwritev (`iov` is consumed).
absl::Status WriteVecFullyAt(int fd, struct iovec* iov, int count, uint64_t offset, bool* direct);
}  // namespace internal

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_TIERS_BLOCK_FILE_IO_H_
