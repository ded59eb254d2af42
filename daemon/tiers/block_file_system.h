// BlockFileSystem: the filesystem calls a file tier makes for its block files, namespace
// files, usage ledger and locks, behind one interface (LevelDB's Env is the model).
// Production tiers use Default() (POSIX, block_file_io.h underneath); tests wrap it
// (daemon/testing/fault_file_system.h) to inject ENOSPC, EIO, slow and torn I/O into a real
// tier on a real directory, or put daemon/testing/memory_file_system.h in its place; both
// implementations pass one contract suite (tests/unit/tiers/block_file_system_contract_test.cc).
// A shared tier's write journals go through it too (AppendFile, ReadFileRange; their
// directories made, listed and their files removed), but for the rmdir of a dropped journal
// bucket (write_journal.cc), which is made directly.
// Implementations are thread-safe; every call may block on the filesystem.
#ifndef KVSTRATA_DAEMON_TIERS_BLOCK_FILE_SYSTEM_H_
#define KVSTRATA_DAEMON_TIERS_BLOCK_FILE_SYSTEM_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "daemon/namespaces/namespace_spec.h"
#include "daemon/tiers/block_file_format.h"
#include "daemon/tiers/block_file_io.h"

namespace kvstrata {

struct FileInfo {
  uint64_t size = 0;
  absl::Time modified;
  bool regular = false;  // a regular file (not a directory or anything else)
};

// An exclusive advisory lock on a file, held until destroyed.
class FileLock {
 public:
  virtual ~FileLock() = default;
};

class BlockFileSystem {
 public:
  virtual ~BlockFileSystem() = default;

  // The process-wide POSIX implementation (never destroyed).
  static BlockFileSystem* Default();

  // Creates `dir` and its parents.
  virtual absl::Status MakeDirectories(const std::string& dir) = 0;
  // Writes a block file atomically (a temp file renamed into place: block_file_io.h).
  virtual absl::StatusOr<BlockWriteInfo> WriteBlock(const std::string& path,
                                                    const BlockHeader& header,
                                                    absl::string_view payload,
                                                    const BlockWriteOptions& options) = 0;
  // Reads and verifies a block file into `dest`.
  virtual BlockReadResult ReadBlock(const std::string& path, absl::string_view fingerprint,
                                    absl::string_view key, absl::Span<char> dest) = 0;
  // `<root>/<fingerprint>/namespace.json` (namespace_file.h).
  virtual absl::StatusOr<std::string> WriteNamespace(absl::string_view root,
                                                     const NamespaceSpec& spec) = 0;
  virtual absl::StatusOr<NamespaceSpec> ReadNamespace(absl::string_view root,
                                                      absl::string_view fingerprint) = 0;
  // stat(2); nullopt when nothing is there.
  virtual std::optional<FileInfo> Stat(const std::string& path) = 0;
  // Stat, answered by the file's server rather than a client's caches: a shared tier's
  // probe. A network client can answer stat(2), even with AT_STATX_FORCE_SYNC, from caches
  // for a second or more after another node deleted the file (GlusterFS FUSE: its attribute
  // and metadata caches), so the POSIX implementation opens the file and reads its first
  // 4 KiB with O_DIRECT (a plain read where the filesystem has no O_DIRECT): nullopt when
  // that fails (gone: ENOENT, ESTALE; or unreadable now). This default calls Stat.
  virtual std::optional<FileInfo> StatUncached(const std::string& path) { return Stat(path); }
  // Calls fn(name, is_dir) for each entry of `dir` but "." and "..". False when unreadable.
  virtual bool ListDirectory(const std::string& dir,
                             const std::function<void(absl::string_view, bool)>& fn) = 0;
  // unlink(2); true when this call removed the file.
  virtual bool Remove(const std::string& path) = 0;
  // Sets the file's modification time to now.
  virtual void Touch(const std::string& path) = 0;
  // Bytes free for an unprivileged writer on the filesystem holding `path`.
  virtual std::optional<uint64_t> FreeBytes(const std::string& path) = 0;
  // Moves a bad block file aside (block_file_io.h Quarantine); returns where it went.
  virtual absl::StatusOr<std::string> Quarantine(const std::string& path,
                                                 const std::string& root) = 0;
  // An exclusive lock on `path` (created if needed) without waiting; nullptr when another
  // holder has it or it cannot be opened.
  virtual std::unique_ptr<FileLock> TryLock(const std::string& path) = 0;
  // Appends all of `data` to the file at `path` (created if needed, mode 0644; its
  // directory must exist) through O_APPEND, so concurrent appenders' writes do not overwrite
  // each other. An error when the file cannot be opened or written (a short write retried
  // first); part of `data` may then be there.
  virtual absl::Status AppendFile(const std::string& path, absl::string_view data) = 0;
  // Up to `max_bytes` of the file at `path` from `offset` ("" at or past its end; fewer
  // bytes than asked only at its end). NOT_FOUND when no file is there; another error when
  // it cannot be read.
  virtual absl::StatusOr<std::string> ReadFileRange(const std::string& path, uint64_t offset,
                                                    size_t max_bytes) = 0;
  // Read-modify-write of a small file under an exclusive flock, waiting for other holders:
  // update(current contents) returns the new contents (at most 16 KiB) or nullopt to leave
  // it. The file is always 16 KiB, the contents zero-padded (update() sees them without
  // the padding), written and fdatasync'd before the lock is released, with O_DIRECT where
  // the filesystem has it. Before the read, under the lock, the POSIX implementation sets
  // the file's size to 16 KiB (a new file is then 16 KiB of zeros, which update() sees as
  // ""): a truncate drops what a network client cached of the file, contents and size,
  // which O_DIRECT alone did not (GlusterFS: block_file_system.cc). Errors: the file
  // cannot be opened, locked, truncated, read, is larger, or the write fails.
  virtual absl::Status UpdateLockedFile(
      const std::string& path,
      const std::function<std::optional<std::string>(absl::string_view current)>& update) = 0;
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_TIERS_BLOCK_FILE_SYSTEM_H_
