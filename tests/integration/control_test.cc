// The control API over a real socket: sessions, namespaces, and one test per class of bad
// input, each asserting the code and that the daemon still answers afterwards.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/integration/daemon_process.h"
#include "tests/integration/proto_specs.h"

namespace kvstrata::testing {
namespace {

class ControlTest : public ::testing::Test {
 protected:
  explicit ControlTest(std::vector<std::string> flags = {}) : daemon_(std::move(flags)) {}
  void SetUp() override {
    ASSERT_TRUE(daemon_.Start().ok()) << daemon_.log();
    client_ = daemon_.NewClient();
  }
  void TearDown() override {
    if (client_ == nullptr) return;  // SetUp failed; it reported why.
    // Whatever a test sent, the daemon is still alive and answering.
    EXPECT_TRUE(client_->Call(&v1::Admin::Stub::GetStatus, client_->admin(), {}).ok());
    client_.reset();  // A connected gRPC client makes the server's shutdown wait for it.
    EXPECT_EQ(daemon_.Stop(), 0) << daemon_.log();
  }

  uint64_t OpenSession(uint32_t heartbeat_ms = 0) {
    v1::OpenSessionRequest request;
    request.set_client_name("control-test");
    request.set_pid(static_cast<uint32_t>(getpid()));
    request.set_hostname("localhost");
    request.set_heartbeat_timeout_ms(heartbeat_ms);
    auto response = client_->Call(&v1::Control::Stub::OpenSession, client_->control(), request);
    EXPECT_TRUE(response.ok()) << response.status();
    return response.ok() ? response->session_id() : 0;
  }

  absl::StatusOr<v1::RegisterNamespaceResponse> Register(uint64_t session,
                                                         const v1::NamespaceSpec& spec) {
    v1::RegisterNamespaceRequest request;
    request.set_session_id(session);
    *request.mutable_spec() = spec;
    return client_->Call(&v1::Control::Stub::RegisterNamespace, client_->control(), request);
  }

  absl::StatusCode LookupCode(uint64_t session, uint32_t ns, std::vector<std::string> keys) {
    v1::LookupRequest request;
    request.set_session_id(session);
    request.set_namespace_id(ns);
    for (auto& key : keys) request.add_keys(key);
    return client_->Call(&v1::Control::Stub::Lookup, client_->control(), request).status().code();
  }

  DaemonProcess daemon_;
  std::unique_ptr<Client> client_;
};

TEST_F(ControlTest, SessionLifecycle) {
  uint64_t session = OpenSession();
  ASSERT_NE(session, 0u);
  v1::HeartbeatRequest heartbeat;
  heartbeat.set_session_id(session);
  auto beat = client_->Call(&v1::Control::Stub::Heartbeat, client_->control(), heartbeat);
  ASSERT_TRUE(beat.ok());
  EXPECT_GT(beat->server_time_unix_ms(), 0u);
  auto sessions = client_->Call(&v1::Admin::Stub::ListSessions, client_->admin(), {});
  ASSERT_EQ(sessions->sessions_size(), 1);
  EXPECT_EQ(sessions->sessions(0).client_name(), "control-test");
  EXPECT_EQ(sessions->sessions(0).pid(), static_cast<uint32_t>(getpid()));
  v1::CloseSessionRequest close;
  close.set_session_id(session);
  EXPECT_TRUE(client_->Call(&v1::Control::Stub::CloseSession, client_->control(), close).ok());
  EXPECT_EQ(
      client_->Call(&v1::Control::Stub::Heartbeat, client_->control(), heartbeat).status().code(),
      absl::StatusCode::kNotFound);
  EXPECT_EQ(client_->Call(&v1::Admin::Stub::ListSessions, client_->admin(), {})->sessions_size(),
            0);
}

TEST_F(ControlTest, SessionWithoutHeartbeatsExpires) {
  uint64_t session = OpenSession(/*heartbeat_ms=*/200);
  absl::SleepFor(absl::Milliseconds(800));
  v1::HeartbeatRequest heartbeat;
  heartbeat.set_session_id(session);
  EXPECT_EQ(
      client_->Call(&v1::Control::Stub::Heartbeat, client_->control(), heartbeat).status().code(),
      absl::StatusCode::kNotFound);
}

TEST_F(ControlTest, SameLayoutSameFingerprintDifferentLayoutDifferent) {
  uint64_t a = OpenSession(), b = OpenSession();
  auto first = Register(a, Llama8bSpec());
  auto again = Register(b, Llama8bSpec());
  ASSERT_TRUE(first.ok() && again.ok());
  EXPECT_EQ(first->fingerprint(), again->fingerprint());
  EXPECT_EQ(first->namespace_id(), again->namespace_id());
  EXPECT_EQ(first->bytes_per_block(), 2u * 32 * 8 * 128 * 16 * 2);
  v1::NamespaceSpec rank1 = Llama8bSpec();
  rank1.set_tp_size(2);
  rank1.set_tp_rank(1);
  auto other = Register(a, rank1);
  ASSERT_TRUE(other.ok());
  EXPECT_NE(other->fingerprint(), first->fingerprint());
  auto listed = client_->Call(&v1::Admin::Stub::ListNamespaces, client_->admin(), {});
  ASSERT_EQ(listed->namespaces_size(), 2);
  EXPECT_EQ(listed->namespaces(0).sessions(), 2u);
  EXPECT_EQ(listed->namespaces(0).spec().model(), "meta-llama/Llama-3.1-8B");
}

TEST_F(ControlTest, UnknownSessionIsNotFoundEverywhere) {
  const uint64_t unknown = 12345;
  v1::HeartbeatRequest heartbeat;
  heartbeat.set_session_id(unknown);
  EXPECT_EQ(
      client_->Call(&v1::Control::Stub::Heartbeat, client_->control(), heartbeat).status().code(),
      absl::StatusCode::kNotFound);
  v1::CloseSessionRequest close;
  close.set_session_id(unknown);
  EXPECT_EQ(
      client_->Call(&v1::Control::Stub::CloseSession, client_->control(), close).status().code(),
      absl::StatusCode::kNotFound);
  EXPECT_EQ(Register(unknown, Llama8bSpec()).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(LookupCode(unknown, 1, {"k"}), absl::StatusCode::kNotFound);
}

TEST_F(ControlTest, InvalidSpecsAreInvalidArgument) {
  uint64_t session = OpenSession();
  v1::RegisterNamespaceRequest no_spec;
  no_spec.set_session_id(session);
  EXPECT_EQ(client_->Call(&v1::Control::Stub::RegisterNamespace, client_->control(), no_spec)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  v1::NamespaceSpec empty_model = Llama8bSpec(), zero_layers = Llama8bSpec(),
                    bad_rank = Llama8bSpec(), bad_enum = Llama8bSpec(), huge = Llama8bSpec();
  empty_model.set_model("");
  zero_layers.set_num_layers(0);
  bad_rank.set_tp_size(2);
  bad_rank.set_tp_rank(2);
  bad_enum.set_dtype(static_cast<v1::DType>(77));
  huge.set_num_layers(4096);
  huge.set_num_kv_heads(4096);
  for (const auto& spec : {empty_model, zero_layers, bad_rank, bad_enum, huge}) {
    absl::Status status = Register(session, spec).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  }
}

TEST_F(ControlTest, BadOpenSessionArguments) {
  v1::OpenSessionRequest no_name;
  EXPECT_EQ(
      client_->Call(&v1::Control::Stub::OpenSession, client_->control(), no_name).status().code(),
      absl::StatusCode::kInvalidArgument);
  v1::OpenSessionRequest long_host;
  long_host.set_client_name("x");
  long_host.set_hostname(std::string(300, 'h'));
  EXPECT_EQ(
      client_->Call(&v1::Control::Stub::OpenSession, client_->control(), long_host).status().code(),
      absl::StatusCode::kInvalidArgument);
}

TEST_F(ControlTest, NamespaceMustExistAndBelongToTheSession) {
  uint64_t owner = OpenSession(), stranger = OpenSession();
  auto ns = Register(owner, Llama8bSpec());
  ASSERT_TRUE(ns.ok());
  EXPECT_EQ(LookupCode(owner, 999, {"k"}), absl::StatusCode::kNotFound);
  EXPECT_EQ(LookupCode(stranger, ns->namespace_id(), {"k"}), absl::StatusCode::kFailedPrecondition);
  v1::RegisterKvMemoryRequest no_memory;
  no_memory.set_session_id(owner);
  no_memory.set_namespace_id(ns->namespace_id());
  EXPECT_EQ(client_->Call(&v1::Control::Stub::RegisterKvMemory, client_->control(), no_memory)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(ControlTest, MalformedKeysAreInvalidArgument) {
  uint64_t session = OpenSession();
  uint32_t ns = Register(session, Llama8bSpec())->namespace_id();
  EXPECT_EQ(LookupCode(session, ns, {}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LookupCode(session, ns, {std::string(33, 'k')}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LookupCode(session, ns, {"ok", ""}), absl::StatusCode::kInvalidArgument);
  std::vector<std::string> too_many(65537, "k");
  EXPECT_EQ(LookupCode(session, ns, too_many), absl::StatusCode::kInvalidArgument);
}

class SmallLimitsTest : public ControlTest {
 protected:
  SmallLimitsTest()
      : ControlTest({"--set=server.max_message_bytes=64KiB,sessions.max_sessions=2"}) {}
};

TEST_F(SmallLimitsTest, OversizedMessageIsResourceExhausted) {
  uint64_t session = OpenSession();
  uint32_t ns = Register(session, Llama8bSpec())->namespace_id();
  std::vector<std::string> keys(4000, std::string(32, 'k'));  // ~140 KB
  EXPECT_EQ(LookupCode(session, ns, keys), absl::StatusCode::kResourceExhausted);
}

TEST_F(SmallLimitsTest, SessionLimitIsResourceExhausted) {
  OpenSession();
  OpenSession();
  v1::OpenSessionRequest request;
  request.set_client_name("third");
  EXPECT_EQ(
      client_->Call(&v1::Control::Stub::OpenSession, client_->control(), request).status().code(),
      absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace kvstrata::testing
