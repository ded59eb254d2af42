// MapSessionRegion against a fake fd server speaking the control.proto protocol: a thread
// that accepts one connection, reads the session id and answers size + memfd (or 0).
#include "client/cpp/shm_region_client.h"

#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "gtest/gtest.h"

namespace kvstrata {
namespace {

constexpr uint64_t kSession = 0x0102030405060708ull;
constexpr uint64_t kBytes = 1 << 20;

void SendAnswer(int connection, uint64_t size, int fd) {
  unsigned char wire[8];
  for (int i = 0; i < 8; ++i) wire[i] = static_cast<unsigned char>(size >> (8 * i));
  iovec io{wire, sizeof(wire)};
  msghdr message{};
  message.msg_iov = &io;
  message.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (fd >= 0) {
    message.msg_control = control;
    message.msg_controllen = sizeof(control);
    cmsghdr* header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(header), &fd, sizeof(int));
  }
  ASSERT_EQ(sendmsg(connection, &message, MSG_NOSIGNAL), 8);
}

// Serves one exchange: a known session gets kBytes + the memfd; others get 0. With
// `attach_fd` false, a known session gets the size without a descriptor (malformed).
class FakeFdServer {
 public:
  explicit FakeFdServer(bool attach_fd = true) : attach_fd_(attach_fd) {
    char dir[] = "/tmp/kvs_shm_client_XXXXXX";
    dir_ = mkdtemp(dir);
    path_ = dir_ + "/fd.sock";
    memfd_ = memfd_create("kvs-test", MFD_CLOEXEC);
    EXPECT_EQ(ftruncate(memfd_, kBytes), 0);
    listen_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strcpy(addr.sun_path, path_.c_str());
    EXPECT_EQ(bind(listen_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(listen(listen_, 4), 0);
    thread_ = std::thread([this] { ServeOne(); });
  }
  ~FakeFdServer() {
    if (thread_.joinable()) thread_.join();
    close(listen_);
    close(memfd_);
    unlink(path_.c_str());
    rmdir(dir_.c_str());
  }
  const std::string& path() const { return path_; }
  int memfd() const { return memfd_; }
  void Join() { thread_.join(); }

 private:
  void ServeOne() {
    int connection = accept(listen_, nullptr, nullptr);
    ASSERT_GE(connection, 0);
    unsigned char wire[8];
    ASSERT_EQ(read(connection, wire, 8), 8);
    uint64_t session = 0;
    for (int i = 0; i < 8; ++i) session |= static_cast<uint64_t>(wire[i]) << (8 * i);
    bool known = session == kSession;
    SendAnswer(connection, known ? kBytes : 0, known && attach_fd_ ? memfd_ : -1);
    close(connection);
  }

  bool attach_fd_;
  std::string dir_, path_;
  int memfd_ = -1, listen_ = -1;
  std::thread thread_;
};

TEST(ShmRegionClientTest, MapsTheSharedRegionReadWrite) {
  FakeFdServer server;
  absl::StatusOr<MappedRegion> region = MapSessionRegion(server.path(), kSession);
  ASSERT_TRUE(region.ok()) << region.status();
  ASSERT_EQ(region->size(), kBytes);
  std::memcpy(region->data() + 4096, "kvstrata", 8);
  char check[8];
  ASSERT_EQ(pread(server.memfd(), check, 8, 4096), 8);
  EXPECT_EQ(std::memcmp(check, "kvstrata", 8), 0);  // MAP_SHARED: the server sees it
}

TEST(ShmRegionClientTest, UnknownSessionIsNotFound) {
  FakeFdServer server;
  absl::StatusOr<MappedRegion> region = MapSessionRegion(server.path(), 99);
  EXPECT_EQ(region.status().code(), absl::StatusCode::kNotFound) << region.status();
}

TEST(ShmRegionClientTest, SizeWithoutDescriptorIsInternal) {
  FakeFdServer server(/*attach_fd=*/false);
  absl::StatusOr<MappedRegion> region = MapSessionRegion(server.path(), kSession);
  EXPECT_EQ(region.status().code(), absl::StatusCode::kInternal) << region.status();
}

TEST(ShmRegionClientTest, MissingSocketIsUnavailable) {
  absl::StatusOr<MappedRegion> region = MapSessionRegion("/tmp/kvs-no-such-dir/fd.sock", 1);
  EXPECT_EQ(region.status().code(), absl::StatusCode::kUnavailable) << region.status();
}

TEST(ShmRegionClientTest, OverlongPathIsInvalidArgument) {
  absl::StatusOr<MappedRegion> region = MapSessionRegion(std::string(200, 'x'), 1);
  EXPECT_EQ(region.status().code(), absl::StatusCode::kInvalidArgument) << region.status();
}

TEST(ShmRegionClientTest, MoveTransfersTheMappingAndAtChecksBounds) {
  FakeFdServer server;
  absl::StatusOr<MappedRegion> region = MapSessionRegion(server.path(), kSession);
  ASSERT_TRUE(region.ok()) << region.status();
  char* data = region->data();
  MappedRegion moved = std::move(*region);
  EXPECT_TRUE(region->empty());
  EXPECT_EQ(moved.data(), data);
  EXPECT_EQ(moved.At(0, kBytes), data);
  EXPECT_EQ(moved.At(kBytes - 1, 1), data + kBytes - 1);
  EXPECT_EQ(moved.At(kBytes, 1), nullptr);
  EXPECT_EQ(moved.At(1, kBytes), nullptr);
  EXPECT_EQ(moved.At(~0ull, 2), nullptr);
  MappedRegion other;
  other = std::move(moved);
  EXPECT_EQ(other.data(), data);
  EXPECT_TRUE(moved.empty());
}

}  // namespace
}  // namespace kvstrata
