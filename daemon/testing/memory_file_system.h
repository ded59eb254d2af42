// MemoryFileSystem: a BlockFileSystem (daemon/tiers/block_file_system.h) that keeps its
// directories and files in memory (LevelDB's in-memory Env is the model), so a test can run
// a FileTier's logic without a temp directory. It passes the same contract suite as the
// POSIX one (tests/unit/tiers/block_file_system_contract_test.cc): block files hold the real
// on-disk bytes (block_file_format.h) and reads verify them the same way, so a block read
// back is a hit, a miss of the same reason, or a bad file to quarantine, as on a disk.
//
// What differs from a disk, on purpose: paths are plain strings ("//" and a trailing '/' are
// ignored; no ".", "..", symlinks or current directory), "/" always exists, a directory has
// size 0, writes never leave temp files, and an mtime is the given clock's Now() (set on a
// write and by Touch). Free space is the capacity (SetCapacity; 1 PiB by default) less what
// the files hold; a write that does not fit is RESOURCE_EXHAUSTED, as ENOSPC is.
// Locks (TryLock, UpdateLockedFile) exclude each other per path as flock does between
// separate opens, in this process only.
//
// Thread-safe; calls never block but UpdateLockedFile, which waits for the path's lock.
// ListDirectory calls its callback without the internal lock (it may call back in).
// REQUIRES: the MemoryFileSystem outlives the tiers that use it and every FileLock it gave.
#ifndef KVSTRATA_DAEMON_TESTING_MEMORY_FILE_SYSTEM_H_
#define KVSTRATA_DAEMON_TESTING_MEMORY_FILE_SYSTEM_H_

#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "daemon/common/clock.h"
#include "daemon/common/mutex.h"
#include "daemon/tiers/block_file_system.h"

namespace kvstrata {

class MemoryFileSystem final : public BlockFileSystem {
 public:
  static constexpr uint64_t kDefaultCapacity = uint64_t{1} << 50;

  // `clock` (not owned) stamps modification times; it must outlive this.
  explicit MemoryFileSystem(Clock* clock = SystemClock::Get());
  ~MemoryFileSystem() override;

  // The bytes files may hold in all. Lowering it below what they hold removes nothing;
  // later writes fail until there is room again.
  void SetCapacity(uint64_t bytes);
  // A file's bytes, as a test would read them from disk; nullopt when no file is there.
  std::optional<std::string> Contents(const std::string& path) const;
  // Replaces (or creates) a file with `bytes`, as a test would write them, ignoring the
  // capacity. False when the parent directory is missing or `path` is a directory.
  bool SetContents(const std::string& path, std::string bytes);

  absl::Status MakeDirectories(const std::string& dir) override;
  absl::StatusOr<BlockWriteInfo> WriteBlock(const std::string& path, const BlockHeader& header,
                                            absl::string_view payload,
                                            const BlockWriteOptions& options) override;
  BlockReadResult ReadBlock(const std::string& path, absl::string_view fingerprint,
                            absl::string_view key, absl::Span<char> dest) override;
  absl::StatusOr<std::string> WriteNamespace(absl::string_view root,
                                             const NamespaceSpec& spec) override;
  absl::StatusOr<NamespaceSpec> ReadNamespace(absl::string_view root,
                                              absl::string_view fingerprint) override;
  std::optional<FileInfo> Stat(const std::string& path) override;
  bool ListDirectory(const std::string& dir,
                     const std::function<void(absl::string_view, bool)>& fn) override;
  bool Remove(const std::string& path) override;
  absl::Status AppendFile(const std::string& path, absl::string_view data) override;
  absl::StatusOr<std::string> ReadFileRange(const std::string& path, uint64_t offset,
                                            size_t max_bytes) override;
  void Touch(const std::string& path) override;
  std::optional<uint64_t> FreeBytes(const std::string& path) override;
  absl::StatusOr<std::string> Quarantine(const std::string& path, const std::string& root) override;
  std::unique_ptr<FileLock> TryLock(const std::string& path) override;
  absl::Status UpdateLockedFile(
      const std::string& path,
      const std::function<std::optional<std::string>(absl::string_view current)>& update) override;

 private:
  class PathLock;
  struct Node {
    bool dir = false;
    std::string data;  // a file's bytes
    absl::Time modified;
  };

  // Creates `dir` and its parents. FAILED_PRECONDITION when a file is in the way.
  absl::Status MakeDirectoriesLocked(const std::string& dir) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Creates or replaces the file at `path` (a normalized path). NOT_FOUND when its parent
  // is not a directory, FAILED_PRECONDITION when `path` is a directory, RESOURCE_EXHAUSTED
  // when `capacity` is passed and the new bytes do not fit.
  absl::Status PutLocked(const std::string& path, std::string bytes, bool capacity)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool IsDirLocked(const std::string& path) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes the flock-like lock on `path` (normalized): without waiting (false when held) or
  // waiting for its holder.
  bool TryLockPath(const std::string& path);
  void LockPath(const std::string& path);
  void UnlockPath(const std::string& path);

  Clock* const clock_;
  mutable Mutex mu_;
  std::map<std::string, Node> nodes_ ABSL_GUARDED_BY(mu_);  // by normalized path
  uint64_t used_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t capacity_bytes_ ABSL_GUARDED_BY(mu_) = kDefaultCapacity;
  uint64_t quarantined_ ABSL_GUARDED_BY(mu_) = 0;  // names each quarantined file uniquely
  absl::flat_hash_set<std::string> locked_ ABSL_GUARDED_BY(mu_);
  // UnlockPath bumps `unlocks_` and wakes LockPath's waiters. Lock order: wait_mu_ is never
  // held while taking mu_.
  std::mutex wait_mu_;
  std::condition_variable unlocked_;
  uint64_t unlocks_ = 0;  // guarded by wait_mu_
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_TESTING_MEMORY_FILE_SYSTEM_H_
