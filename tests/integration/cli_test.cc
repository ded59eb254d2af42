// The `kvstrata` binary against a real daemon: tables, --json, and a daemon that is down.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/integration/daemon_process.h"

namespace kvstrata::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

ExitResult Cli(const std::string& endpoint, const std::string& args) {
  return RunCommand(std::string(KVSTRATA_CLI_PATH) + " --endpoint=" + endpoint + " " + args);
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(daemon_.Start().ok()) << daemon_.log(); }
  DaemonProcess daemon_;
};

TEST_F(CliTest, StatusShowsVersionUptimeListenersAndTiers) {
  ExitResult result = Cli(daemon_.socket(), "status");
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_THAT(result.output, HasSubstr("kvstratad "));
  EXPECT_THAT(result.output, HasSubstr("uptime"));
  EXPECT_THAT(result.output, HasSubstr(daemon_.socket()));
  EXPECT_THAT(result.output, HasSubstr("l1"));
  EXPECT_THAT(result.output, HasSubstr("64.0MiB"));
}

TEST_F(CliTest, StatusJsonIsMachineReadable) {
  ExitResult result = Cli(daemon_.socket(), "status --json");
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_THAT(result.output, HasSubstr("\"version\": \"0.1.0\""));
  EXPECT_THAT(result.output, HasSubstr("\"uptime_ms\""));
  EXPECT_THAT(result.output, HasSubstr("\"listeners\""));
  EXPECT_THAT(result.output, HasSubstr("\"capacity_bytes\": \"67108864\""));
}

TEST_F(CliTest, ConfigNamespacesSessionsAndTiers) {
  ExitResult config = Cli(daemon_.socket(), "config");
  EXPECT_EQ(config.exit_code, 0);
  EXPECT_THAT(config.output, HasSubstr("l1.capacity"));
  EXPECT_THAT(config.output, HasSubstr("flag"));
  EXPECT_THAT(Cli(daemon_.socket(), "config --toml").output, HasSubstr("[sessions]"));
  auto client = daemon_.NewClient();
  v1::OpenSessionRequest open;
  open.set_client_name("cli-test");
  uint64_t session = client->Call(&v1::Control::Stub::OpenSession, client->control(), open)
                         ->session_id();
  v1::RegisterNamespaceRequest reg;
  reg.set_session_id(session);
  reg.mutable_spec()->set_engine_kind(v1::ENGINE_KIND_SGLANG);
  reg.mutable_spec()->set_model("tiny");
  reg.mutable_spec()->set_dtype(v1::DTYPE_FLOAT16);
  reg.mutable_spec()->set_kv_layout(v1::KV_LAYOUT_OPAQUE);
  reg.mutable_spec()->set_opaque_block_bytes(4096);
  auto ns = client->Call(&v1::Control::Stub::RegisterNamespace, client->control(), reg);
  ASSERT_TRUE(ns.ok());
  ExitResult namespaces = Cli(daemon_.socket(), "namespaces");
  EXPECT_EQ(namespaces.exit_code, 0);
  EXPECT_THAT(namespaces.output, HasSubstr(ns->fingerprint()));
  EXPECT_THAT(namespaces.output, HasSubstr("sglang"));
  EXPECT_THAT(namespaces.output, HasSubstr("float16"));
  EXPECT_THAT(Cli(daemon_.socket(), "namespaces --json").output, HasSubstr("\"fingerprint\""));
  EXPECT_THAT(Cli(daemon_.socket(), "sessions").output, HasSubstr("cli-test"));
  EXPECT_THAT(Cli(daemon_.socket(), "tiers").output, HasSubstr("disabled"));
}

TEST_F(CliTest, UnknownCommandIsAUsageError) {
  ExitResult result = Cli(daemon_.socket(), "frobnicate");
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.output, HasSubstr("usage:"));
}

TEST(CliDaemonDownTest, SaysSoInOneLineAndExitsNonZero) {
  ExitResult result = Cli("/tmp/kvstrata-nonexistent/kvstrata.sock", "status");
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_THAT(result.output, HasSubstr("cannot reach kvstratad"));
  EXPECT_EQ(std::count(result.output.begin(), result.output.end(), '\n'), 1);
  EXPECT_THAT(result.output, Not(HasSubstr("terminate")));
}

}  // namespace
}  // namespace kvstrata::testing
