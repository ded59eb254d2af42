#include "daemon/server/socket_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace kvstrata {
namespace {

absl::Status ErrnoError(absl::string_view what, const std::string& path) {
  return absl::FailedPreconditionError(absl::StrCat(what, " '", path, "': ", std::strerror(errno)));
}

std::string ReadPid(int fd) {
  char buffer[32] = {};
  ssize_t n = pread(fd, buffer, sizeof(buffer) - 1, 0);
  return n > 0 ? std::string(absl::StripAsciiWhitespace(absl::string_view(buffer, n))) : "?";
}

}  // namespace

absl::StatusOr<SocketLock> SocketLock::Acquire(const std::string& socket_path) {
  std::filesystem::path dir = std::filesystem::path(socket_path).parent_path();
  std::error_code ec;
  if (!std::filesystem::exists(dir, ec)) {
    std::filesystem::create_directories(dir, ec);
    if (ec)
      return absl::FailedPreconditionError(
          absl::StrCat("cannot create '", dir.string(), "': ", ec.message()));
    chmod(dir.c_str(), 0750);
  }
  std::string lock_path = socket_path + ".lock";
  int fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoError("cannot open lock file", lock_path);
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    std::string pid = ReadPid(fd);
    close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat("another kvstratad (pid ", pid, ") is already serving '", socket_path, "'"));
  }
  std::string pid = absl::StrCat(getpid(), "\n");
  if (ftruncate(fd, 0) != 0 || pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    close(fd);
    return ErrnoError("cannot write lock file", lock_path);
  }
  if (unlink(socket_path.c_str()) != 0 && errno != ENOENT) {
    close(fd);
    return ErrnoError("cannot remove stale socket", socket_path);
  }
  return SocketLock(socket_path, fd);
}

SocketLock::SocketLock(SocketLock&& other) noexcept
    : socket_path_(std::move(other.socket_path_)), fd_(other.fd_) {
  other.fd_ = -1;
}

SocketLock& SocketLock::operator=(SocketLock&& other) noexcept {
  if (this != &other) {
    Release();
    socket_path_ = std::move(other.socket_path_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

SocketLock::~SocketLock() { Release(); }

void SocketLock::Release() {
  if (fd_ < 0) return;
  unlink(socket_path_.c_str());
  unlink((socket_path_ + ".lock").c_str());
  close(fd_);
  fd_ = -1;
}

}  // namespace kvstrata
