#include "daemon/tiers/block_file_io.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "daemon/tiers/block_path.h"

namespace kvstrata {
namespace {

constexpr size_t kStagingBytes = 4 << 20;

class UniqueFd {
 public:
  explicit UniqueFd(int fd = -1) : fd_(fd) {}
  ~UniqueFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  int get() const { return fd_; }
  // Closes now and reports close(2)'s error (NFS reports write errors here).
  absl::Status Close() {
    const int fd = fd_;
    fd_ = -1;
    return ::close(fd) == 0 ? absl::OkStatus() : ErrnoToStatus(errno, "close");
  }

 private:
  int fd_;
};

// Unlinks the temp file on scope exit unless Release()d.
class TempFileGuard {
 public:
  explicit TempFileGuard(std::string path) : path_(std::move(path)) {}
  ~TempFileGuard() {
    if (armed_) ::unlink(path_.c_str());
  }
  TempFileGuard(const TempFileGuard&) = delete;
  TempFileGuard& operator=(const TempFileGuard&) = delete;
  void Release() { armed_ = false; }

 private:
  std::string path_;
  bool armed_ = true;
};

struct FreeDeleter {
  void operator()(char* p) const { std::free(p); }
};

uint64_t RandomU64() {
  uint64_t value = 0;
  if (::getrandom(&value, sizeof(value), 0) != sizeof(value)) {
    value = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  }
  return value;
}

uint64_t NowUnixMs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

std::string ParentDir(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

absl::Status FsyncDir(const std::string& dir) {
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) return ErrnoToStatus(errno, absl::StrCat("open dir ", dir));
  if (::fsync(fd.get()) != 0) return ErrnoToStatus(errno, absl::StrCat("fsync dir ", dir));
  return fd.Close();
}

// A directory on the way missing (ENOENT) or replaced through another mount (ESTALE).
bool IsDirectoryRace(const absl::Status& status) {
  return absl::IsNotFound(status) || absl::IsAborted(status);
}

int RealOpen(const char* path, int flags, mode_t mode) { return ::open(path, flags, mode); }
void RealSleepMs(int ms) { ::usleep(static_cast<useconds_t>(ms) * 1000u); }

constexpr internal::DirectoryCalls kRealDirectoryCalls = {::mkdir, ::stat, RealOpen, RealSleepMs};
std::atomic<const internal::DirectoryCalls*> directory_calls{&kRealDirectoryCalls};

// Opens a new temp file, with O_DIRECT when asked and the filesystem allows it.
absl::StatusOr<int> OpenTemp(const std::string& tmp, bool* direct) {
  constexpr int kFlags = O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC;
  const internal::DirectoryCalls& calls = internal::CurrentDirectoryCalls();
  if (*direct) {
    const int fd = calls.open(tmp.c_str(), kFlags | O_DIRECT, 0644);
    if (fd >= 0) return fd;
    if (errno != EINVAL) return ErrnoToStatus(errno, absl::StrCat("open ", tmp));
    ::unlink(tmp.c_str());  // Some filesystems create the file before refusing O_DIRECT.
    *direct = false;
  }
  const int fd = calls.open(tmp.c_str(), kFlags, 0644);
  if (fd < 0) return ErrnoToStatus(errno, absl::StrCat("open ", tmp));
  return fd;
}

// Copies bytes [offset, offset + size) of the file image (header, payload, zero padding)
// into `out`.
void FillChunk(absl::string_view header, absl::string_view payload, uint64_t offset, size_t size,
               char* out) {
  std::memset(out, 0, size);
  const uint64_t end = offset + size;
  if (offset < header.size()) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(end, header.size()) - offset);
    std::memcpy(out, header.data() + offset, n);
  }
  const uint64_t payload_begin = header.size();
  const uint64_t payload_end = payload_begin + payload.size();
  const uint64_t from = std::max(offset, payload_begin);
  const uint64_t to = std::min(end, payload_end);
  if (from < to) {
    std::memcpy(out + (from - offset), payload.data() + (from - payload_begin),
                static_cast<size_t>(to - from));
  }
}

// The image through an aligned staging buffer, chunk by chunk: for a payload whose
// memory O_DIRECT cannot take (not on a 4 KiB boundary).
absl::Status WriteImageStaged(int fd, absl::string_view header, absl::string_view payload,
                              bool* direct) {
  const uint64_t total = BlockFileBytes(payload.size());
  const size_t staging_size = static_cast<size_t>(std::min<uint64_t>(total, kStagingBytes));
  void* raw = nullptr;
  if (::posix_memalign(&raw, kBlockFileAlignment, staging_size) != 0) {
    return absl::ResourceExhaustedError("cannot allocate the write staging buffer");
  }
  std::unique_ptr<char, FreeDeleter> staging(static_cast<char*>(raw));
  for (uint64_t offset = 0; offset < total; offset += staging_size) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(staging_size, total - offset));
    FillChunk(header, payload, offset, n, staging.get());
    if (absl::Status s = internal::WriteFullyAt(fd, staging.get(), n, offset, direct); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

// The image with no copy of the payload (an L1 slot is page-aligned): one pwritev of the
// header page, the payload's whole pages from the caller's memory, and its last partial
// page zero-padded in a small staging page. Falls back to the staged write when the
// payload's memory is not 4 KiB-aligned.
absl::Status WriteImage(int fd, absl::string_view header, absl::string_view payload, bool* direct) {
  const size_t whole = payload.size() / kBlockFileAlignment * kBlockFileAlignment;
  const size_t tail = payload.size() - whole;
  if (header.size() != kBlockHeaderBytes ||
      (whole > 0 && reinterpret_cast<uintptr_t>(payload.data()) % kBlockFileAlignment != 0)) {
    return WriteImageStaged(fd, header, payload, direct);
  }
  void* raw = nullptr;
  if (::posix_memalign(&raw, kBlockFileAlignment, 2 * kBlockFileAlignment) != 0) {
    return absl::ResourceExhaustedError("cannot allocate the write staging buffer");
  }
  std::unique_ptr<char, FreeDeleter> pages(static_cast<char*>(raw));
  std::memcpy(pages.get(), header.data(), kBlockHeaderBytes);
  char* tail_page = pages.get() + kBlockFileAlignment;
  std::memset(tail_page, 0, kBlockFileAlignment);
  std::memcpy(tail_page, payload.data() + whole, tail);
  iovec iov[3];
  int count = 0;
  iov[count++] = {pages.get(), kBlockHeaderBytes};
  if (whole > 0) iov[count++] = {const_cast<char*>(payload.data()), whole};
  if (tail > 0) iov[count++] = {tail_page, kBlockFileAlignment};
  return internal::WriteVecFullyAt(fd, iov, count, 0, direct);
}

absl::Status WriteSyncClose(UniqueFd& fd, absl::string_view header, absl::string_view payload,
                            const BlockWriteOptions& options, bool* direct) {
  if (absl::Status s = WriteImage(fd.get(), header, payload, direct); !s.ok()) return s;
  if (options.fsync != FsyncPolicy::kNone && ::fdatasync(fd.get()) != 0) {
    return ErrnoToStatus(errno, "fdatasync");
  }
  return fd.Close();
}

}  // namespace

absl::Status ErrnoToStatus(int error, absl::string_view what) {
  const std::string message = absl::StrCat(what, ": ", std::strerror(error));
  switch (error) {
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
      return absl::ResourceExhaustedError(message);
    case EIO:
      return absl::UnavailableError(message);
    case ENOENT:
      return absl::NotFoundError(message);
    case ESTALE:
      return absl::AbortedError(message);
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::PermissionDeniedError(message);
    default:
      return absl::InternalError(message);
  }
}

namespace {

// One pass of mkdir -p, then a stat of `dir`. EEXIST from a mkdir is fine: whether the path
// is a directory is settled by the stat. ENOENT or ESTALE, from a mkdir or the stat, is a
// race with another client of a network filesystem creating or replacing a directory on
// the way: `*racing` is set and the status says where.
absl::Status MakeDirectoriesOnce(const internal::DirectoryCalls& calls, const std::string& dir,
                                 bool* racing) {
  *racing = false;
  for (size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos != dir.size() && dir[pos] != '/') continue;
    const std::string prefix = dir.substr(0, pos);
    if (calls.mkdir(prefix.c_str(), 0755) == 0) continue;
    const int error = errno;
    if (error == EEXIST) continue;
    *racing = error == ENOENT || error == ESTALE;
    return ErrnoToStatus(error, absl::StrCat("mkdir ", prefix));
  }
  struct stat st;
  if (calls.stat(dir.c_str(), &st) != 0) {
    const int error = errno;
    *racing = error == ENOENT || error == ESTALE;
    return ErrnoToStatus(error, absl::StrCat("stat ", dir));
  }
  if (!S_ISDIR(st.st_mode)) return absl::FailedPreconditionError(dir + " is not a directory");
  return absl::OkStatus();
}

}  // namespace

absl::Status MakeDirectories(const std::string& dir) {
  if (dir.empty()) return absl::InvalidArgumentError("empty directory path");
  const internal::DirectoryCalls& calls = internal::CurrentDirectoryCalls();
  // A directory another client of a network filesystem creates at the same moment can
  // answer EEXIST to our mkdir and then ENOENT or ESTALE to the next step for a while
  // (GlusterFS, two daemons writing into a new <xx>/<yy>; a FUSE mount caches entries for
  // up to 1 s): the whole pass is tried again, backing off, before it counts as a race.
  constexpr int kBackoffMs[] = {1, 4, 16, 64, 256, 1000};
  absl::Status status;
  for (size_t attempt = 0;; ++attempt) {
    bool racing = false;
    status = MakeDirectoriesOnce(calls, dir, &racing);
    if (!racing) return status;
    if (attempt == std::size(kBackoffMs)) break;
    calls.sleep_ms(kBackoffMs[attempt]);
  }
  // Still racing: not a failing disk.
  return absl::AbortedError(absl::StrCat("directory race: ", status.message()));
}

namespace {

// The filesystem refused an O_DIRECT write (EINVAL): clear O_DIRECT on `fd` and go on
// buffered.
absl::Status FallBackToBuffered(int fd, bool* direct) {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_DIRECT) != 0) {
    return ErrnoToStatus(errno, "fcntl clear O_DIRECT");
  }
  *direct = false;
  return absl::OkStatus();
}

}  // namespace

namespace internal {

const DirectoryCalls& CurrentDirectoryCalls() { return *directory_calls.load(); }

void SetDirectoryCallsForTest(const DirectoryCalls* calls) {
  directory_calls.store(calls != nullptr ? calls : &kRealDirectoryCalls);
}

absl::Status WriteFullyAt(int fd, const char* data, size_t size, uint64_t offset, bool* direct) {
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::pwrite(fd, data + done, size - done, static_cast<off_t>(offset + done));
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EINVAL && *direct) {
      if (absl::Status s = FallBackToBuffered(fd, direct); !s.ok()) return s;
      continue;
    }
    return ErrnoToStatus(n == 0 ? EIO : errno, "pwrite");
  }
  return absl::OkStatus();
}

absl::Status WriteVecFullyAt(int fd, iovec* iov, int count, uint64_t offset, bool* direct) {
  while (count > 0) {
    const ssize_t n = ::pwritev(fd, iov, count, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EINVAL && *direct) {
      if (absl::Status s = FallBackToBuffered(fd, direct); !s.ok()) return s;
      continue;
    }
    if (n <= 0) return ErrnoToStatus(n == 0 ? EIO : errno, "pwritev");
    offset += static_cast<uint64_t>(n);
    for (size_t left = static_cast<size_t>(n); left > 0 && count > 0;) {
      const size_t step = std::min(left, iov->iov_len);
      iov->iov_base = static_cast<char*>(iov->iov_base) + step;
      iov->iov_len -= step;
      left -= step;
      if (iov->iov_len == 0) ++iov, --count;
    }
    while (count > 0 && iov->iov_len == 0) ++iov, --count;
  }
  return absl::OkStatus();
}

}  // namespace internal

absl::StatusOr<BlockWriteInfo> WriteBlockFile(const std::string& path, const BlockHeader& header,
                                              absl::string_view payload,
                                              const BlockWriteOptions& options) {
  if (header.payload_bytes != payload.size()) {
    return absl::InvalidArgumentError("header payload length does not match the payload");
  }
  const std::string dir = ParentDir(path);
  const std::string tmp =
      absl::StrCat(path, ".tmp.", ::getpid(), ".", absl::Hex(RandomU64(), absl::kZeroPad16));
  bool direct = options.try_direct_io;
  absl::StatusOr<int> opened = OpenTemp(tmp, &direct);
  // Directories are made when missing, not checked on every write. A directory missing
  // (ENOENT) or replaced through another mount (ESTALE) is made again and the open retried;
  // one that keeps racing drops this write as a race, not as a failing disk.
  for (int attempt = 0; !opened.ok() && attempt < 3; ++attempt) {
    if (absl::Status s = MakeDirectories(dir); !s.ok()) return s;
    if (!IsDirectoryRace(opened.status())) break;
    opened = OpenTemp(tmp, &direct);
  }
  if (!opened.ok()) {
    if (IsDirectoryRace(opened.status())) {
      return absl::AbortedError(absl::StrCat("directory race: ", opened.status().message()));
    }
    return opened.status();
  }
  UniqueFd fd(*opened);
  TempFileGuard guard(tmp);
  const std::string encoded = EncodeBlockHeader(header);
  if (absl::Status s = WriteSyncClose(fd, encoded, payload, options, &direct); !s.ok()) return s;
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return ErrnoToStatus(errno, absl::StrCat("rename to ", path));
  }
  guard.Release();
  if (options.fsync == FsyncPolicy::kFileAndDir) {
    if (absl::Status s = FsyncDir(dir); !s.ok()) return s;
  }
  return BlockWriteInfo{direct};
}

absl::StatusOr<std::string> Quarantine(const std::string& path, const std::string& root) {
  std::string base = root;
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  if (base.empty() || path.size() <= base.size() + 1 || path.compare(0, base.size(), base) != 0 ||
      path[base.size()] != '/') {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not under ", root));
  }
  const std::string quarantine_dir = absl::StrCat(base, "/", kQuarantineDirName);
  if (absl::Status s = MakeDirectories(quarantine_dir); !s.ok()) return s;
  const std::string relative = absl::StrReplaceAll(path.substr(base.size() + 1), {{"/", "%"}});
  const std::string target = absl::StrCat(quarantine_dir, "/", relative, ".", NowUnixMs(), ".",
                                          absl::Hex(RandomU64(), absl::kZeroPad16));
  if (::rename(path.c_str(), target.c_str()) != 0) {
    return ErrnoToStatus(errno, absl::StrCat("quarantine ", path));
  }
  return target;
}

}  // namespace kvstrata
