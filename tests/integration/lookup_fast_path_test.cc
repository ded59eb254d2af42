// The fast path (<socket>.lookup) against a real daemon: the same answers as
// Control.Lookup (hits, tiers, a lease that AcquireLoad consumes), persistent
// connections, and one test per class of bad input, each checking that the daemon still
// answers afterwards (TearDown).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "client/cpp/lookup_client.h"
#include "daemon/rpc/fast_path/lookup_wire.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/proto_specs.h"

namespace kvstrata::testing {
namespace {

namespace wire = lookup_wire;

std::vector<std::string> Keys(int first, int count) {
  std::vector<std::string> keys;
  for (int i = first; i < first + count; ++i) keys.push_back(absl::StrFormat("%032d", i));
  return keys;
}

class LookupFastPathTest : public ::testing::Test {
 protected:
  LookupFastPathTest() : daemon_({"--set=l1.capacity=64MiB,l1.slab_size=4MiB,l2.enabled=false"}) {}

  void SetUp() override {
    ASSERT_TRUE(daemon_.Start().ok()) << daemon_.log();
    client_ = daemon_.NewClient();
    v1::OpenSessionResponse open = OpenSession();
    session_ = open.session_id();
    lookup_socket_ = open.lookup_socket();
    ns_ = RegisterNamespace(session_);
    Store(Keys(0, 8));
  }
  void TearDown() override {
    // Whatever a test sent, the daemon still answers, on both sockets.
    LookupClient fresh(lookup_socket_);
    absl::StatusOr<FastLookupResult> r = fresh.Lookup(session_, ns_, Keys(0, 8));
    ASSERT_TRUE(r.ok()) << r.status() << daemon_.log();
    EXPECT_EQ(r->hit_blocks, 8u);
    EXPECT_TRUE(client_->Call(&v1::Admin::Stub::GetStatus, client_->admin(), {}).ok());
    client_.reset();
    EXPECT_EQ(daemon_.Stop(), 0) << daemon_.log();
  }

  v1::OpenSessionResponse OpenSession() {
    v1::OpenSessionRequest request;
    request.set_client_name("lookup-fast-path-test");
    auto response = client_->Call(&v1::Control::Stub::OpenSession, client_->control(), request);
    EXPECT_TRUE(response.ok()) << response.status();
    return response.ok() ? *response : v1::OpenSessionResponse();
  }

  uint32_t RegisterNamespace(uint64_t session) {
    v1::RegisterNamespaceRequest request;
    request.set_session_id(session);
    *request.mutable_spec() = OpaqueSpec("lookup-fast-path-test", 4096);
    auto response =
        client_->Call(&v1::Control::Stub::RegisterNamespace, client_->control(), request);
    EXPECT_TRUE(response.ok()) << response.status();
    return response.ok() ? response->namespace_id() : 0;
  }

  // ReserveStore + CommitStore of every key (the bytes are not written: not needed here).
  void Store(const std::vector<std::string>& keys) {
    v1::ReserveStoreRequest reserve;
    reserve.set_session_id(session_);
    reserve.set_namespace_id(ns_);
    for (const std::string& key : keys) reserve.add_keys(key);
    auto reserved = client_->Call(&v1::Control::Stub::ReserveStore, client_->control(), reserve);
    ASSERT_TRUE(reserved.ok()) << reserved.status();
    v1::CommitStoreRequest commit;
    commit.set_session_id(session_);
    commit.set_reservation_id(reserved->reservation_id());
    auto committed = client_->Call(&v1::Control::Stub::CommitStore, client_->control(), commit);
    ASSERT_TRUE(committed.ok()) << committed.status();
    ASSERT_EQ(committed->committed_blocks(), keys.size());
  }

  absl::StatusOr<v1::LookupResponse> GrpcLookup(const std::vector<std::string>& keys) {
    v1::LookupRequest request;
    request.set_session_id(session_);
    request.set_namespace_id(ns_);
    for (const std::string& key : keys) request.add_keys(key);
    return client_->Call(&v1::Control::Stub::Lookup, client_->control(), request);
  }

  // A raw connection to the fast-path socket.
  int RawConnect() {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, lookup_socket_.c_str(), sizeof(addr.sun_path) - 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    timeval timeout{10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    return fd;
  }

  wire::RequestHeader Header(uint32_t key_count, uint32_t key_bytes) const {
    wire::RequestHeader h;
    h.session_id = session_;
    h.namespace_id = ns_;
    h.key_count = key_count;
    h.key_bytes = key_bytes;
    return h;
  }

  static std::string Frame(const wire::RequestHeader& h, size_t key_bytes_sent) {
    std::string frame(wire::kRequestHeaderBytes + key_bytes_sent, '7');
    wire::EncodeRequestHeader(h, frame.data());
    return frame;
  }

  static void Send(int fd, const std::string& bytes) {
    ASSERT_EQ(send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(bytes.size()));
  }

  // Reads one response frame; its status code (-1 when none came).
  static int ReadStatus(int fd, uint32_t* hits = nullptr) {
    char header[wire::kResponseHeaderBytes];
    if (recv(fd, header, sizeof(header), MSG_WAITALL) != sizeof(header)) return -1;
    wire::ResponseHeader h = wire::DecodeResponseHeader(header);
    EXPECT_EQ(h.magic, wire::kMagic);
    std::string rest(h.tier_count + h.message_bytes, '\0');
    if (!rest.empty() &&
        recv(fd, rest.data(), rest.size(), MSG_WAITALL) != static_cast<ssize_t>(rest.size())) {
      return -1;
    }
    if (hits != nullptr) *hits = h.hit_blocks;
    return static_cast<int>(h.status);
  }

  // EOF, or ECONNRESET when the daemon closed with bytes of ours still unread.
  static bool ClosedByDaemon(int fd) {
    char byte;
    ssize_t n = recv(fd, &byte, 1, 0);
    return n == 0 || (n < 0 && errno == ECONNRESET);
  }

  // Sends `bytes` on a fresh connection: the daemon answers INVALID_ARGUMENT and closes.
  void ExpectRejectedAndClosed(const std::string& bytes) {
    int fd = RawConnect();
    Send(fd, bytes);
    EXPECT_EQ(ReadStatus(fd), static_cast<int>(absl::StatusCode::kInvalidArgument));
    EXPECT_TRUE(ClosedByDaemon(fd));
    close(fd);
  }

  DaemonProcess daemon_;
  std::unique_ptr<Client> client_;
  uint64_t session_ = 0;
  uint32_t ns_ = 0;
  std::string lookup_socket_;
};

TEST_F(LookupFastPathTest, AdvertisedBesideTheGrpcSocketWithItsMode) {
  EXPECT_EQ(lookup_socket_, daemon_.socket() + ".lookup");
  struct stat grpc_socket {
  }, lookup_socket{};
  ASSERT_EQ(stat(daemon_.socket().c_str(), &grpc_socket), 0);
  ASSERT_EQ(stat(lookup_socket_.c_str(), &lookup_socket), 0);
  EXPECT_TRUE(S_ISSOCK(lookup_socket.st_mode));
  EXPECT_EQ(lookup_socket.st_mode & 0777, grpc_socket.st_mode & 0777);
}

TEST_F(LookupFastPathTest, SameAnswersAsGrpcLookup) {
  std::vector<std::string> gap = Keys(0, 5);
  gap.push_back(Keys(100, 1)[0]);  // Missing: the chain stops here.
  gap.push_back(Keys(5, 1)[0]);
  LookupClient fast(lookup_socket_);
  for (const std::vector<std::string>& chain :
       {Keys(0, 8), Keys(0, 1), Keys(0, 20), gap, Keys(50, 3)}) {
    absl::StatusOr<v1::LookupResponse> slow = GrpcLookup(chain);
    ASSERT_TRUE(slow.ok()) << slow.status();
    absl::StatusOr<FastLookupResult> quick = fast.Lookup(session_, ns_, chain);
    ASSERT_TRUE(quick.ok()) << quick.status();
    EXPECT_EQ(quick->hit_blocks, slow->hit_blocks());
    ASSERT_EQ(quick->tiers.size(), static_cast<size_t>(slow->locations_size()));
    for (int i = 0; i < slow->locations_size(); ++i) {
      EXPECT_EQ(quick->tiers[i], slow->locations(i).tier());
      EXPECT_EQ(quick->tiers[i], v1::TIER_L1_DRAM);
    }
    EXPECT_EQ(quick->lease_id, 0u);
  }
  EXPECT_EQ(fast.Lookup(session_, ns_, gap)->hit_blocks, 5u);
}

TEST_F(LookupFastPathTest, LeaseIsConsumedByAcquireLoad) {
  LookupClient fast(lookup_socket_);
  uint64_t before = static_cast<uint64_t>(absl::ToUnixMillis(absl::Now()));
  absl::StatusOr<FastLookupResult> r = fast.Lookup(session_, ns_, Keys(0, 8), {true, 10000});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_NE(r->lease_id, 0u);
  EXPECT_GE(r->lease_expires_unix_ms, before + 10000);
  EXPECT_LE(r->lease_expires_unix_ms, before + 10000 + 5000);
  v1::AcquireLoadRequest load;
  load.set_session_id(session_);
  load.set_namespace_id(ns_);
  for (const std::string& key : Keys(0, 8)) load.add_keys(key);
  load.set_lease_id(r->lease_id);
  auto loaded = client_->Call(&v1::Control::Stub::AcquireLoad, client_->control(), load);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->slots_size(), 8);
  for (const v1::SlotRef& slot : loaded->slots()) EXPECT_EQ(slot.state(), v1::SlotRef::STATE_READY);
  auto again = client_->Call(&v1::Control::Stub::AcquireLoad, client_->control(), load);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kNotFound);  // Consumed.
  // No hit, no lease; a huge TTL is clamped to sessions.max_lease_ttl_ms (60 s).
  EXPECT_EQ(fast.Lookup(session_, ns_, Keys(50, 2), {true, 0})->lease_id, 0u);
  r = fast.Lookup(session_, ns_, Keys(0, 2), {true, 1000000000});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_LE(r->lease_expires_unix_ms,
            static_cast<uint64_t>(absl::ToUnixMillis(absl::Now())) + 60000);
}

TEST_F(LookupFastPathTest, UnknownSessionIsNotFoundAndTheConnectionStays) {
  LookupClient fast(lookup_socket_);
  EXPECT_EQ(fast.Lookup(session_ + 1000, ns_, Keys(0, 2)).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(fast.Lookup(session_, ns_ + 1000, Keys(0, 2)).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(fast.Lookup(session_, ns_, Keys(0, 2))->hit_blocks, 2u);
}

TEST_F(LookupFastPathTest, NamespaceOfAnotherSessionIsFailedPrecondition) {
  uint64_t other = OpenSession().session_id();
  LookupClient fast(lookup_socket_);
  absl::StatusOr<FastLookupResult> r = fast.Lookup(other, ns_, Keys(0, 2));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
}

TEST_F(LookupFastPathTest, BadMagicIsRejected) {
  wire::RequestHeader h = Header(1, 32);
  h.magic = 0x12345678;
  ExpectRejectedAndClosed(Frame(h, 32));
}

TEST_F(LookupFastPathTest, BadVersionAndUnknownFlagsAreRejected) {
  wire::RequestHeader h = Header(1, 32);
  h.version = 3;  // 2 is the several-namespaces frame (test_lookup_namespaces.py)
  ExpectRejectedAndClosed(Frame(h, 32));
  h = Header(1, 32);
  h.flags = 0x8000;
  ExpectRejectedAndClosed(Frame(h, 32));
}

TEST_F(LookupFastPathTest, KeyBytesOutOfRangeIsRejected) {
  ExpectRejectedAndClosed(Frame(Header(1, 0), 0));
  ExpectRejectedAndClosed(Frame(Header(1, 33), 33));
  EXPECT_EQ(LookupClient(lookup_socket_).Lookup(session_, ns_, {"a", "bb"}).status().code(),
            absl::StatusCode::kInvalidArgument);  // Mixed lengths: refused before sending.
}

TEST_F(LookupFastPathTest, KeyCountOutOfRangeIsRejected) {
  ExpectRejectedAndClosed(Frame(Header(65537, 32), 0));
  ExpectRejectedAndClosed(Frame(Header(0, 32), 0));
  ExpectRejectedAndClosed(Frame(Header(0xFFFFFFFF, 32), 0));
}

TEST_F(LookupFastPathTest, TruncatedFrameIsDroppedWithoutBlockingOthers) {
  int fd = RawConnect();
  Send(fd, Frame(Header(10, 32), 100));  // 220 bytes short.
  // Meanwhile another client is served.
  LookupClient fast(lookup_socket_);
  EXPECT_EQ(fast.Lookup(session_, ns_, Keys(0, 8))->hit_blocks, 8u);
  shutdown(fd, SHUT_WR);  // The rest never comes.
  EXPECT_EQ(ReadStatus(fd), -1);
  close(fd);
}

TEST_F(LookupFastPathTest, FrameLargerThanAdvertisedIsRejected) {
  int fd = RawConnect();
  std::string frame = Frame(Header(2, 32), 0);
  for (const std::string& key : Keys(0, 2)) frame += key;
  frame += std::string(40, 'x');  // Read as the next frame's header: bad magic.
  Send(fd, frame);
  uint32_t hits = 0;
  EXPECT_EQ(ReadStatus(fd, &hits), 0);
  EXPECT_EQ(hits, 2u);
  EXPECT_EQ(ReadStatus(fd), static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_TRUE(ClosedByDaemon(fd));
  close(fd);
}

TEST_F(LookupFastPathTest, PipelinedFramesAreAnsweredInOrder) {
  int fd = RawConnect();
  std::string frames;
  for (uint32_t count : {8u, 3u, 5u}) {
    frames += Frame(Header(count, 32), 0);
    for (const std::string& key : Keys(0, count)) frames += key;
  }
  Send(fd, frames);  // Three frames in one write.
  for (uint32_t want : {8u, 3u, 5u}) {
    uint32_t hits = 0;
    EXPECT_EQ(ReadStatus(fd, &hits), 0);
    EXPECT_EQ(hits, want);
  }
  close(fd);
}

TEST_F(LookupFastPathTest, AFrameBeforeAHalfCloseIsStillAnswered) {
  int fd = RawConnect();
  std::string frame = Frame(Header(4, 32), 0);
  for (const std::string& key : Keys(0, 4)) frame += key;
  Send(fd, frame);
  shutdown(fd, SHUT_WR);  // Nothing more will come; the answer must still arrive.
  uint32_t hits = 0;
  EXPECT_EQ(ReadStatus(fd, &hits), 0);
  EXPECT_EQ(hits, 4u);
  EXPECT_TRUE(ClosedByDaemon(fd));
  close(fd);
}

TEST_F(LookupFastPathTest, ManyConnectionsAndPersistentCalls) {
  std::vector<std::unique_ptr<LookupClient>> clients;
  for (int i = 0; i < 20; ++i) clients.push_back(std::make_unique<LookupClient>(lookup_socket_));
  for (int round = 0; round < 5; ++round) {
    for (auto& c : clients) {
      absl::StatusOr<FastLookupResult> r = c->Lookup(session_, ns_, Keys(0, 8));
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(r->hit_blocks, 8u);
    }
  }
}

}  // namespace
}  // namespace kvstrata::testing
