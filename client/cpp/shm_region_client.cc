#include "client/cpp/shm_region_client.h"

#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace kvstrata {
namespace {

// Closes a descriptor on scope exit.
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() {
    if (fd_ >= 0) close(fd_);
  }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

std::string Errno() { return std::strerror(errno); }

absl::StatusOr<int> Connect(const std::string& path) {
  sockaddr_un addr{};
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("bad fd socket path: '", path, "'"));
  }
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("socket: ", Errno()));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    std::string error = Errno();
    close(fd);
    return absl::UnavailableError(absl::StrCat("cannot connect to '", path, "': ", error));
  }
  timeval timeout{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  return fd;
}

absl::Status SendSessionId(int fd, uint64_t session_id) {
  unsigned char wire[8];
  for (int i = 0; i < 8; ++i) wire[i] = static_cast<unsigned char>(session_id >> (8 * i));
  size_t sent = 0;
  while (sent < sizeof(wire)) {
    ssize_t n = send(fd, wire + sent, sizeof(wire) - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return absl::UnavailableError(absl::StrCat("send session id: ", Errno()));
    sent += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

// The received descriptor (-1 when none came) is taken from the control message of the
// first chunk; closes any extra descriptors a misbehaving peer attached.
int TakeFd(msghdr& message) {
  int received = -1;
  for (cmsghdr* h = CMSG_FIRSTHDR(&message); h != nullptr; h = CMSG_NXTHDR(&message, h)) {
    if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS) continue;
    size_t count = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(h) + i * sizeof(int), sizeof(int));
      if (received < 0) {
        received = fd;
      } else {
        close(fd);
      }
    }
  }
  return received;
}

struct Answer {
  uint64_t size = 0;
  int fd = -1;  // owned by the caller
};

absl::StatusOr<Answer> ReceiveAnswer(int fd) {
  unsigned char wire[8];
  size_t got = 0;
  Answer answer;
  while (got < sizeof(wire)) {
    iovec io{wire + got, sizeof(wire) - got};
    msghdr message{};
    message.msg_iov = &io;
    message.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(4 * sizeof(int))] = {};
    message.msg_control = control;
    message.msg_controllen = sizeof(control);
    ssize_t n = recvmsg(fd, &message, MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR) continue;
    int passed = TakeFd(message);
    if (passed >= 0 && answer.fd >= 0) close(passed);
    if (passed >= 0 && answer.fd < 0) answer.fd = passed;
    if (n <= 0) {
      if (answer.fd >= 0) close(answer.fd);
      return absl::UnavailableError(absl::StrCat("fd socket closed after ", got, " of 8 bytes",
                                                 n < 0 ? absl::StrCat(": ", Errno()) : ""));
    }
    got += static_cast<size_t>(n);
  }
  for (int i = 0; i < 8; ++i) answer.size |= static_cast<uint64_t>(wire[i]) << (8 * i);
  return answer;
}

}  // namespace

MappedRegion::MappedRegion(MappedRegion&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedRegion& MappedRegion::operator=(MappedRegion&& other) noexcept {
  if (this != &other) {
    Reset();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

MappedRegion::~MappedRegion() { Reset(); }

void MappedRegion::Reset() {
  if (data_ != nullptr) munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
}

char* MappedRegion::At(uint64_t offset, uint64_t length) const {
  if (data_ == nullptr || offset > size_ || length > size_ - offset) return nullptr;
  return data_ + offset;
}

absl::StatusOr<MappedRegion> MapSessionRegion(const std::string& fd_socket_path,
                                              uint64_t session_id) {
  absl::StatusOr<int> connected = Connect(fd_socket_path);
  if (!connected.ok()) return connected.status();
  FdCloser socket_fd(*connected);
  if (absl::Status sent = SendSessionId(socket_fd.get(), session_id); !sent.ok()) return sent;
  absl::StatusOr<Answer> answer = ReceiveAnswer(socket_fd.get());
  if (!answer.ok()) return answer.status();
  FdCloser region_fd(answer->fd);
  if (answer->size == 0) {
    return absl::NotFoundError(absl::StrCat("daemon does not know session ", session_id));
  }
  if (region_fd.get() < 0) {
    return absl::InternalError("fd socket answered a size but attached no descriptor");
  }
  void* data = mmap(nullptr, answer->size, PROT_READ | PROT_WRITE, MAP_SHARED, region_fd.get(), 0);
  if (data == MAP_FAILED) {
    return absl::InternalError(
        absl::StrCat("mmap of ", answer->size, " bytes of the shared region: ", Errno()));
  }
  return MappedRegion(static_cast<char*>(data), answer->size);
}

}  // namespace kvstrata
