// The `kvstrata` binary against a real daemon: tables, --json, and a daemon that is down.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/integration/daemon_process.h"
#include "tests/integration/proto_specs.h"

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
  // 64-bit numbers are JSON numbers, not the proto3 mapping's strings.
  EXPECT_THAT(result.output, HasSubstr("\"capacity_bytes\": 67108864,"));
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
  uint64_t session =
      client->Call(&v1::Control::Stub::OpenSession, client->control(), open)->session_id();
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

TEST_F(CliTest, CacheCommandsLookupPinEvictClearAndStats) {
  auto client = daemon_.NewClient();
  v1::OpenSessionRequest open;
  open.set_client_name("cli-cache");
  uint64_t session =
      client->Call(&v1::Control::Stub::OpenSession, client->control(), open)->session_id();
  v1::RegisterNamespaceRequest reg;
  reg.set_session_id(session);
  *reg.mutable_spec() = OpaqueSpec("cli", 4096);
  auto ns = client->Call(&v1::Control::Stub::RegisterNamespace, client->control(), reg);
  ASSERT_TRUE(ns.ok());
  v1::ReserveStoreRequest reserve;
  reserve.set_session_id(session);
  reserve.set_namespace_id(ns->namespace_id());
  for (const char* key : {"\x01\x02", "\x03\x04"}) reserve.add_keys(key);
  auto reserved = client->Call(&v1::Control::Stub::ReserveStore, client->control(), reserve);
  ASSERT_TRUE(reserved.ok());
  v1::CommitStoreRequest commit;
  commit.set_session_id(session);
  commit.set_reservation_id(reserved->reservation_id());
  ASSERT_TRUE(client->Call(&v1::Control::Stub::CommitStore, client->control(), commit).ok());

  const std::string target = ns->fingerprint() + " 0102 0304 0506";
  ExitResult lookup = Cli(daemon_.socket(), "lookup " + target);
  EXPECT_EQ(lookup.exit_code, 0) << lookup.output;
  EXPECT_THAT(lookup.output, HasSubstr("0102  l1"));
  EXPECT_THAT(lookup.output, HasSubstr("0506  -"));
  EXPECT_THAT(lookup.output, HasSubstr("2 of 3 keys are leading hits"));
  EXPECT_THAT(Cli(daemon_.socket(), "pin " + target).output, HasSubstr("pinned 2 blocks"));
  EXPECT_THAT(Cli(daemon_.socket(), "evict " + target).output, HasSubstr("evicted 0 blocks"));
  EXPECT_THAT(Cli(daemon_.socket(), "unpin " + target).output, HasSubstr("unpinned 2 blocks"));
  EXPECT_THAT(Cli(daemon_.socket(), "evict " + ns->fingerprint() + " 0102").output,
              HasSubstr("evicted 1 blocks"));
  ExitResult clear = Cli(daemon_.socket(), "clear all");
  EXPECT_EQ(clear.exit_code, 0) << clear.output;
  EXPECT_THAT(clear.output, HasSubstr("100%"));
  EXPECT_THAT(clear.output, HasSubstr("cleared 1 blocks"));
  ExitResult stats = Cli(daemon_.socket(), "stats");
  EXPECT_THAT(stats.output, HasSubstr("l1_blocks"));
  EXPECT_THAT(stats.output, HasSubstr("no connector has reported load planner decisions"));
  EXPECT_THAT(Cli(daemon_.socket(), "stats --json").output, HasSubstr("\"counters\""));
  EXPECT_EQ(Cli(daemon_.socket(), "lookup " + ns->fingerprint() + " xyz").exit_code, 1);
  ExitResult unknown = Cli(daemon_.socket(), "lookup 00000000000000000000000000000000 01");
  EXPECT_EQ(unknown.exit_code, 3);
  EXPECT_THAT(unknown.output, HasSubstr("no namespace has fingerprint"));
}

TEST_F(CliTest, UnknownCommandIsAUsageError) {
  ExitResult result = Cli(daemon_.socket(), "frobnicate");
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.output, HasSubstr("unknown command 'frobnicate'"));
  EXPECT_THAT(result.output, HasSubstr("usage:"));
}

// Issue 18: --help printed "No flags matched." for both programs.
TEST(CliHelpTest, HelpListsCommandsAndFlags) {
  ExitResult result = RunCommand(std::string(KVSTRATA_CLI_PATH) + " --help");
  EXPECT_THAT(result.output, HasSubstr("commands:"));
  EXPECT_THAT(result.output, HasSubstr("drain"));
  for (const char* flag : {"--endpoint", "--json", "--tier", "--timeout", "--token_file"}) {
    EXPECT_THAT(result.output, HasSubstr(flag));
  }
  EXPECT_THAT(result.output, Not(HasSubstr("No flags matched")));
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
