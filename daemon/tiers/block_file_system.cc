#include "daemon/tiers/block_file_system.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "daemon/tiers/namespace_file.h"

namespace kvstrata {
namespace {

class PosixFileLock final : public FileLock {
 public:
  explicit PosixFileLock(int fd) : fd_(fd) {}
  ~PosixFileLock() override { ::close(fd_); }  // Also releases the flock.

 private:
  const int fd_;
};

// A process killed while two or more of its threads had a flock request in flight on a
// GlusterFS 10.3 FUSE mount (the kernel sends the filesystem an INTERRUPT for each; its
// SETLK interrupt handler) hung the mount: no answer to any call, the killed process a
// zombie (tests/torture/crash_loop.py, docs/crash-contract.md). So one flock call at a
// time per process (flock_call_mu), none waiting inside the call (LOCK_NB, retried after a
// pause of 0.2 ms doubling to 20 ms), and one ledger update at a time per process
// (ledger_update_mu, taken before flock_call_mu).
std::mutex flock_call_mu;
std::mutex ledger_update_mu;

int FlockOnce(int fd, int operation) {
  std::lock_guard<std::mutex> one_at_a_time(flock_call_mu);
  return ::flock(fd, operation);
}

absl::Status LockPolling(int fd, const std::string& path) {
  useconds_t pause_us = 200;
  while (FlockOnce(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK && errno != EINTR) {
      return absl::ErrnoToStatus(errno, absl::StrCat("flock ", path));
    }
    ::usleep(pause_us);
    pause_us = std::min<useconds_t>(pause_us * 2, 20'000);
  }
  return absl::OkStatus();
}

class PosixBlockFileSystem final : public BlockFileSystem {
 public:
  absl::Status MakeDirectories(const std::string& dir) override {
    return kvstrata::MakeDirectories(dir);
  }
  absl::StatusOr<BlockWriteInfo> WriteBlock(const std::string& path, const BlockHeader& header,
                                            absl::string_view payload,
                                            const BlockWriteOptions& options) override {
    return WriteBlockFile(path, header, payload, options);
  }
  BlockReadResult ReadBlock(const std::string& path, absl::string_view fingerprint,
                            absl::string_view key, absl::Span<char> dest) override {
    return ReadBlockFileInto(path, fingerprint, key, dest);
  }
  absl::StatusOr<std::string> WriteNamespace(absl::string_view root,
                                             const NamespaceSpec& spec) override {
    return WriteNamespaceFile(root, spec);
  }
  absl::StatusOr<NamespaceSpec> ReadNamespace(absl::string_view root,
                                              absl::string_view fingerprint) override {
    return ReadNamespaceFile(root, fingerprint);
  }
  std::optional<FileInfo> Stat(const std::string& path) override {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return std::nullopt;
    return FileInfo{static_cast<uint64_t>(st.st_size), absl::TimeFromTimespec(st.st_mtim),
                    S_ISREG(st.st_mode)};
  }
  std::optional<FileInfo> StatUncached(const std::string& path) override {
    // O_NONBLOCK: a FIFO left in the directory must not wait for a writer (fstat below
    // then says it is not a regular file).
    constexpr int kFlags = O_RDONLY | O_CLOEXEC | O_NONBLOCK;
    int fd = ::open(path.c_str(), kFlags | O_DIRECT);
    if (fd < 0 && errno == EINVAL) fd = ::open(path.c_str(), kFlags);
    if (fd < 0) return std::nullopt;
    PosixFileLock closer(fd);
    struct stat st;
    if (::fstat(fd, &st) != 0) return std::nullopt;
    FileInfo info{static_cast<uint64_t>(st.st_size), absl::TimeFromTimespec(st.st_mtim),
                  S_ISREG(st.st_mode)};
    if (!info.regular || info.size == 0) return info;
    // The open may be answered from a cache (GlusterFS's open-behind); a read reaches the
    // server, which knows whether the file is still there.
    constexpr size_t kPage = 4096;
    std::unique_ptr<char, decltype(&std::free)> page(
        static_cast<char*>(std::aligned_alloc(kPage, kPage)), &std::free);
    if (page == nullptr) return info;
    ssize_t n;
    do {
      n = ::pread(fd, page.get(), kPage, 0);
    } while (n < 0 && errno == EINTR);
    if (n <= 0) return std::nullopt;
    return info;
  }
  bool ListDirectory(const std::string& dir,
                     const std::function<void(absl::string_view, bool)>& fn) override {
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) return false;
    while (const dirent* e = ::readdir(d)) {
      absl::string_view name(e->d_name);
      if (name == "." || name == "..") continue;
      bool is_dir = e->d_type == DT_DIR;
      if (e->d_type == DT_UNKNOWN) {
        struct stat st;
        is_dir = ::stat(absl::StrCat(dir, "/", name).c_str(), &st) == 0 && S_ISDIR(st.st_mode);
      }
      fn(name, is_dir);
    }
    ::closedir(d);
    return true;
  }
  bool Remove(const std::string& path) override { return ::unlink(path.c_str()) == 0; }
  absl::Status AppendFile(const std::string& path, absl::string_view data) override {
    const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("open ", path));
    absl::Status status = absl::OkStatus();
    while (!data.empty()) {
      const ssize_t n = ::write(fd, data.data(), data.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        status = absl::ErrnoToStatus(n < 0 ? errno : EIO, absl::StrCat("append ", path));
        break;
      }
      data.remove_prefix(static_cast<size_t>(n));
    }
    if (::close(fd) != 0 && status.ok()) {
      status = absl::ErrnoToStatus(errno, absl::StrCat("close ", path));
    }
    return status;
  }
  absl::StatusOr<std::string> ReadFileRange(const std::string& path, uint64_t offset,
                                            size_t max_bytes) override {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("open ", path));
    std::string out(max_bytes, '\0');
    size_t have = 0;
    absl::Status status = absl::OkStatus();
    while (have < max_bytes) {
      const ssize_t n =
          ::pread(fd, out.data() + have, max_bytes - have, static_cast<off_t>(offset + have));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        status = absl::ErrnoToStatus(errno, absl::StrCat("read ", path));
        break;
      }
      if (n == 0) break;
      have += static_cast<size_t>(n);
    }
    ::close(fd);
    if (!status.ok()) return status;
    out.resize(have);
    return out;
  }
  void Touch(const std::string& path) override { ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0); }
  std::optional<uint64_t> FreeBytes(const std::string& path) override {
    struct statvfs disk;
    if (::statvfs(path.c_str(), &disk) != 0) return std::nullopt;
    return static_cast<uint64_t>(disk.f_bavail) * disk.f_frsize;
  }
  absl::StatusOr<std::string> Quarantine(const std::string& path,
                                         const std::string& root) override {
    return kvstrata::Quarantine(path, root);
  }
  std::unique_ptr<FileLock> TryLock(const std::string& path) override {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return nullptr;
    auto lock = std::make_unique<PosixFileLock>(fd);
    if (FlockOnce(fd, LOCK_EX | LOCK_NB) != 0) return nullptr;  // Another holder has it.
    return lock;
  }
  absl::Status UpdateLockedFile(
      const std::string& path,
      const std::function<std::optional<std::string>(absl::string_view)>& update) override {
    // O_DIRECT: past the page cache and the caches that honour it (GlusterFS FUSE served
    // each mount its own stale copy of the file in 29 of 58 alternating updates without
    // it); plain I/O where the filesystem has no O_DIRECT (tmpfs). Not past every cache:
    // see the truncate below.
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_DIRECT, 0644);
    if (fd < 0 && errno == EINVAL) fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("open ", path));
    std::lock_guard<std::mutex> one_update_at_a_time(ledger_update_mu);
    PosixFileLock closer(fd);  // Closing releases the flock too.
    if (absl::Status s = LockPolling(fd, path); !s.ok()) return s;
    constexpr size_t kMax = 16 << 10, kAlign = 4096, kBuffer = kMax + kAlign;
    // Now that no other holder can write it, the file set to its own size before it is
    // read: a truncate makes a client drop what it cached of the file and answers with the
    // file's attributes. O_DIRECT alone did not reach the file on GlusterFS 10.3 FUSE:
    // quick-read keeps the contents of a small file (up to 64 KiB by default) that a
    // lookup returned, such as this open's before the lock, and serves reads from them for
    // a second whatever the flags (it drops them on this client's own writes and
    // truncates); and the kernel ends a read at the size it cached, 0 for a file another
    // mount had just created. So a mount's first read under the lock returned the file as
    // it was before the other mount's last update: 643 of 8,000 updates lost over 20
    // rounds of two processes (16 rounds losing some), none after (test_l3_gluster.py,
    // test_usage_ledger_loses_no_update).
    struct stat st;
    if (::fstat(fd, &st) != 0) return absl::ErrnoToStatus(errno, absl::StrCat("stat ", path));
    if (static_cast<uint64_t>(st.st_size) > kMax) {
      return absl::OutOfRangeError(absl::StrCat(path, " is over 16 KiB"));
    }
    if (::ftruncate(fd, static_cast<off_t>(kMax)) != 0) {
      return absl::ErrnoToStatus(errno, absl::StrCat("truncate ", path));
    }
    std::unique_ptr<char, decltype(&std::free)> buffer(
        static_cast<char*>(std::aligned_alloc(kAlign, kBuffer)), &std::free);
    if (buffer == nullptr) return absl::ResourceExhaustedError("no memory for " + path);
    size_t have = 0;
    while (have <= kMax) {  // Whole aligned chunks: O_DIRECT reads stop short at the end.
      const ssize_t n = ::pread(fd, buffer.get() + have, kBuffer - have, static_cast<off_t>(have));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return absl::ErrnoToStatus(errno, absl::StrCat("read ", path));
      have += static_cast<size_t>(n);
      if (n == 0 || have % kAlign != 0) break;
    }
    if (have > kMax) return absl::OutOfRangeError(absl::StrCat(path, " is over 16 KiB"));
    size_t text = have;  // The contents end at the zero padding.
    while (text > 0 && buffer.get()[text - 1] == '\0') --text;
    std::optional<std::string> next = update(absl::string_view(buffer.get(), text));
    if (!next.has_value()) return absl::OkStatus();
    if (next->size() > kMax) return absl::OutOfRangeError("new contents over 16 KiB");
    // Always the whole 16 KiB, zero-padded: the file never changes size, so a reader whose
    // client cached an older size (GlusterFS) still reads all of it and nothing stale.
    std::memset(buffer.get(), 0, kMax);
    std::memcpy(buffer.get(), next->data(), next->size());
    size_t done = 0;
    while (done < kMax) {
      const ssize_t n = ::pwrite(fd, buffer.get() + done, kMax - done, static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return absl::ErrnoToStatus(errno, absl::StrCat("write ", path));
      done += static_cast<size_t>(n);
    }
    if (::ftruncate(fd, static_cast<off_t>(kMax)) != 0 || ::fdatasync(fd) != 0) {
      return absl::ErrnoToStatus(errno, absl::StrCat("write ", path));
    }
    return absl::OkStatus();
  }
};

}  // namespace

BlockFileSystem* BlockFileSystem::Default() {
  static BlockFileSystem* fs = new PosixBlockFileSystem;
  return fs;
}

}  // namespace kvstrata
