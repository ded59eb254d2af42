// MapSessionRegion against the daemon's real FdServer (a real SessionRegistry decides
// which session is known), plus one raw server for a malformed answer the real one never
// sends.
#include "client/cpp/shm_region_client.h"

#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "daemon/pool/shm_region.h"
#include "daemon/server/fd_server.h"
#include "daemon/session/session_registry.h"
#include "daemon/session/tenant_table.h"
#include "gtest/gtest.h"

namespace kvstrata {
namespace {

constexpr uint64_t kBytes = 1 << 20;

// The daemon's fd server over a 1 MiB memfd, with one open session.
class FdServerFixture {
 public:
  FdServerFixture() : sessions_(SessionLimits{}), tenants_(*TenantTable::Create({}, "")) {
    char dir[] = "/tmp/kvs_shm_client_XXXXXX";
    dir_ = mkdtemp(dir);
    path_ = dir_ + "/fd.sock";
    ShmRegionOptions options;
    options.bytes = kBytes;
    options.huge_pages = HugePages::kOff;
    options.populate_threads = -1;
    region_ = *ShmRegion::Create(options);
    session_ =
        sessions_.Open(kDefaultTenant, "client-test", 1, "localhost", absl::ZeroDuration())->id;
    server_ = *FdServer::Start(path_, 0600, region_.get(), &sessions_, &tenants_, &fence_);
  }
  ~FdServerFixture() {
    server_->Stop();
    rmdir(dir_.c_str());
  }
  const std::string& path() const { return path_; }
  int memfd() const { return region_->fd(); }
  uint64_t session() const { return session_; }
  const ProcessFence& fence() const { return fence_; }

 private:
  SessionRegistry sessions_;
  TenantTable tenants_;
  ProcessFence fence_;
  std::string dir_, path_;
  std::unique_ptr<ShmRegion> region_;
  uint64_t session_ = 0;
  std::unique_ptr<FdServer> server_;
};

// Answers one connection with a size but no descriptor (a malformed server).
class SizeOnlyServer {
 public:
  SizeOnlyServer() {
    char dir[] = "/tmp/kvs_shm_client_XXXXXX";
    dir_ = mkdtemp(dir);
    path_ = dir_ + "/fd.sock";
    listen_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strcpy(addr.sun_path, path_.c_str());
    EXPECT_EQ(bind(listen_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(listen(listen_, 1), 0);
    thread_ = std::thread([this] {
      int connection = accept(listen_, nullptr, nullptr);
      char wire[8];
      EXPECT_EQ(read(connection, wire, 8), 8);
      uint64_t size = kBytes;  // Little-endian on the x86-64/arm64 hosts we run on.
      EXPECT_EQ(write(connection, &size, 8), 8);
      close(connection);
    });
  }
  ~SizeOnlyServer() {
    thread_.join();
    close(listen_);
    unlink(path_.c_str());
    rmdir(dir_.c_str());
  }
  const std::string& path() const { return path_; }

 private:
  std::string dir_, path_;
  int listen_ = -1;
  std::thread thread_;
};

TEST(ShmRegionClientTest, MapsTheSharedRegionReadWrite) {
  FdServerFixture server;
  absl::StatusOr<MappedRegion> region = MapSessionRegion(server.path(), server.session());
  ASSERT_TRUE(region.ok()) << region.status();
  ASSERT_EQ(region->size(), kBytes);
  std::memcpy(region->data() + 4096, "kvstrata", 8);
  char check[8];
  ASSERT_EQ(pread(server.memfd(), check, 8, 4096), 8);
  EXPECT_EQ(std::memcmp(check, "kvstrata", 8), 0);  // MAP_SHARED: the server sees it
}

TEST(ShmRegionClientTest, HandingTheRegionOverFencesTheSessionWithItsProcess) {
  FdServerFixture server;
  EXPECT_FALSE(server.fence().MayWrite(server.session()));
  absl::StatusOr<MappedRegion> region = MapSessionRegion(server.path(), server.session());
  ASSERT_TRUE(region.ok()) << region.status();
  EXPECT_TRUE(server.fence().MayWrite(server.session()));  // This process: running.
}

TEST(ShmRegionClientTest, IdleConnectionsDoNotDelayAGoodClient) {
  FdServerFixture server;
  std::vector<int> idle;  // Connected, never send their session id.
  for (int i = 0; i < 10; ++i) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strcpy(addr.sun_path, server.path().c_str());
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    idle.push_back(fd);
  }
  absl::SleepFor(absl::Milliseconds(200));  // All accepted (and waiting) by now.
  const absl::Time start = absl::Now();
  absl::StatusOr<MappedRegion> region = MapSessionRegion(server.path(), server.session());
  ASSERT_TRUE(region.ok()) << region.status();
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(500));  // Not 10 x the 2 s timeout.
  for (int fd : idle) close(fd);
}

TEST(ShmRegionClientTest, UnknownSessionIsNotFound) {
  FdServerFixture server;
  absl::StatusOr<MappedRegion> region = MapSessionRegion(server.path(), server.session() + 1);
  EXPECT_EQ(region.status().code(), absl::StatusCode::kNotFound) << region.status();
  EXPECT_EQ(server.fence().size(), 0u);  // Nothing is tracked for an unknown session.
}

TEST(ShmRegionClientTest, SizeWithoutDescriptorIsInternal) {
  SizeOnlyServer server;
  absl::StatusOr<MappedRegion> region = MapSessionRegion(server.path(), 1);
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
  FdServerFixture server;
  absl::StatusOr<MappedRegion> region = MapSessionRegion(server.path(), server.session());
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
