#include "daemon/config/config_loader.h"
#include "tests/unit/config/config_test_util.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <unistd.h>

namespace kvstrata {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

std::string WriteTemp(const std::string& text) {
  return WriteTempConfig("kvstrata_config_test", text);
}

TEST(ConfigLoaderTest, EmbeddedDefaultWorksWithoutGpuOrFiles) {
  absl::StatusOr<Config> config = LoadConfig("", {});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->l1.capacity_bytes, 4ULL << 30);
  EXPECT_TRUE(FindTier(*config, "l2")->enabled);
  EXPECT_FALSE(FindTier(*config, "l2")->path.empty());
  EXPECT_FALSE(FindTier(*config, "l3")->enabled);
  EXPECT_EQ(config->server.socket_mode, 0660u);
  EXPECT_EQ(config->server.socket.front(), '/');
  EXPECT_TRUE(config->config_path.empty());
  for (const ConfigEntry& entry : config->entries) EXPECT_EQ(entry.source, "default");
}

TEST(ConfigLoaderTest, EntriesShowThePathsInUseForEmptyDefaults) {
  absl::StatusOr<Config> config = LoadConfig("", {});
  ASSERT_TRUE(config.ok()) << config.status();
  auto value_of = [&](const std::string& key) {
    const ConfigEntry* e = FindEntry(*config, key);
    return e == nullptr ? std::string("missing") : e->value;
  };
  EXPECT_EQ(value_of("l2.path"), FindTier(*config, "l2")->path);
  EXPECT_EQ(value_of("server.socket"), config->server.socket);
  EXPECT_EQ(value_of("events.pod_id"), config->events.pod_id);
  EXPECT_FALSE(value_of("l2.path").empty());
  EXPECT_THAT(config->effective_toml, HasSubstr(FindTier(*config, "l2")->path));
  absl::StatusOr<Config> given = LoadConfig("", {"l2.path=/srv/l2"});
  ASSERT_TRUE(given.ok()) << given.status();
  EXPECT_EQ(FindTier(*given, "l2")->path, "/srv/l2");
}

TEST(ConfigLoaderTest, FileThenFlagsOverrideDefaults) {
  std::string path = WriteTemp("[l1]\ncapacity = \"1GiB\"\neviction_policy = \"arc\"\n");
  absl::StatusOr<Config> config = LoadConfig(path, {"l1.capacity=2GiB", "log.level=debug"});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->l1.capacity_bytes, 2ULL << 30);
  EXPECT_EQ(config->l1.eviction_policy, "arc");
  EXPECT_EQ(config->log.level, "debug");
  EXPECT_EQ(config->config_path, path);
  auto source_of = [&](const std::string& key) {
    const ConfigEntry* e = FindEntry(*config, key);
    return e == nullptr ? std::string("missing") : e->source;
  };
  EXPECT_EQ(source_of("l1.capacity"), "flag");
  EXPECT_EQ(source_of("l1.eviction_policy"), "file");
  EXPECT_EQ(source_of("l2.capacity"), "default");
  EXPECT_THAT(config->effective_toml, HasSubstr("2GiB"));
}

TEST(ConfigLoaderTest, IntegerIsAcceptedWhereAFloatIsExpected) {
  absl::StatusOr<Config> config = LoadConfig(WriteTemp("[l1]\nhigh_watermark = 1\n"), {});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->l1.high_watermark, 1.0);
}

struct BadCase {
  std::string file;
  std::vector<std::string> flags;
  std::string names;  // The message must name this.
};

class BadConfigTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadConfigTest, StopsWithAMessageNamingTheKey) {
  const BadCase& c = GetParam();
  absl::StatusOr<Config> config = LoadConfig(c.file.empty() ? "" : WriteTemp(c.file), c.flags);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(config.status().message()), HasSubstr(c.names));
}

// Issue 46: one bad value for every key that has a rule beyond its type (the cases above
// and these); EveryKeyHasABadValueCase keeps the list complete.
const std::vector<BadCase> kMoreBadCases = {
    {"", {"server.tls_key_file=/k.pem"}, "server.tls_cert_file"},
    {"", {"server.max_message_bytes=1KiB"}, "server.max_message_bytes"},
    {"", {"server.max_message_bytes=2GiB"}, "server.max_message_bytes"},
    {"", {"server.shutdown_timeout_seconds=-1"}, "server.shutdown_timeout_seconds"},
    {"", {"log.format=xml"}, "log.format"},
    {"", {"sessions.heartbeat_timeout_ms=50"}, "sessions.heartbeat_timeout_ms"},
    {"", {"sessions.max_heartbeat_timeout_ms=50"}, "sessions.max_heartbeat_timeout_ms"},
    {"", {"sessions.lease_ttl_ms=0"}, "sessions.lease_ttl_ms"},
    {"", {"sessions.max_lease_ttl_ms=0"}, "sessions.max_lease_ttl_ms"},
    {"", {"l1.high_watermark=1.5"}, "l1.high_watermark"},
    {"", {"l1.admission_min_lookups=-1"}, "l1.admission_min_lookups"},
    {"", {"l1.huge_pages=maybe"}, "l1.huge_pages"},
    {"", {"l1.slab_size=1536KiB"}, "l1.slab_size"},
    {"", {"l2.capacity=1KiB"}, "l2.capacity"},
    {"", {"l2.kind=shared-file"}, "l2.kind"},
    {"", {"l3.kind=object"}, "l3.kind"},
    {"", {"l2.eviction_policy=mru"}, "l2.eviction_policy"},
    {"", {"l2.high_watermark=0"}, "l2.high_watermark"},
    {"", {"l2.write_down_min_hits=-1"}, "l2.write_down_min_hits"},
    {"", {"l2.write_queue_blocks=0"}, "l2.write_queue_blocks"},
    {"", {"l2.backlog_policy=wait"}, "l2.backlog_policy"},
    {"", {"l2.fsync=always"}, "l2.fsync"},
    {"", {"l2.probe_timeout_ms=-1"}, "l2.probe_timeout_ms"},
    {"", {"l3.enabled=maybe"}, "l3.enabled"},
    {"", {"l3.capacity=lots"}, "l3.capacity"},
    {"", {"l3.high_watermark=2"}, "l3.high_watermark"},
    {"", {"l3.low_watermark=0"}, "l3.low_watermark"},
    {"", {"l3.write_policy=write-around"}, "l3.write_policy"},
    {"", {"l3.write_down_min_hits=-1"}, "l3.write_down_min_hits"},
    {"", {"l3.io_threads=65"}, "l3.io_threads"},
    {"", {"l3.write_queue_blocks=0"}, "l3.write_queue_blocks"},
    {"", {"l3.backlog_policy=wait"}, "l3.backlog_policy"},
    {"", {"l3.probe_timeout_ms=60001"}, "l3.probe_timeout_ms"},
    {"", {"l3.negative_cache_ms=-1"}, "l3.negative_cache_ms"},
    {"", {"l3.access_record_interval_ms=-1"}, "l3.access_record_interval_ms"},
    {"", {"gpu.calibrate=maybe"}, "gpu.calibrate"},
    {"", {"gpu.staged_max_piece_bytes=lots"}, "gpu.staged_max_piece_bytes"},
    {"", {"events.enabled=maybe"}, "events.enabled"},
    {"", {"events.pod_id=a@b"}, "events.pod_id"},
    {"", {"events.node_name=a@b"}, "events.node_name"},
    {"", {"events.encoding=json"}, "events.encoding"},
    {"", {"events.data_parallel_rank=-1"}, "events.data_parallel_rank"},
    {"", {"events.buffer_batches=0"}, "events.buffer_batches"},
    {"", {"events.max_queue_events=0"}, "events.max_queue_events"},
    {"", {"events.send_hwm=-1"}, "events.send_hwm"},
    {"", {"events.flush_interval_ms=0"}, "events.flush_interval_ms"},
};

// Keys that take any value of their type when the configuration is loaded; what they name
// is checked at start, and that error names the key too (daemon_lifecycle_test.cc).
const std::set<std::string> kCheckedAtStart = {"server.auth_token_file"};

const std::vector<BadCase>& BadCases() {
  static const std::vector<BadCase> all = [] {
    std::vector<BadCase> cases = {
        BadCase{"[l1]\ncapasity = \"1GiB\"\n", {}, "l1.capasity"},
        BadCase{"[nosuch]\nx = 1\n", {}, "nosuch"},
        BadCase{"[l1]\ncapacity = 5\n", {}, "l1.capacity"},
        BadCase{"[l1]\ncapacity = \"lots\"\n", {}, "l1.capacity"},
        BadCase{"[l1]\neviction_policy = \"mru\"\n", {}, "l1.eviction_policy"},
        BadCase{"[l1]\nlow_watermark = 0.99\n", {}, "l1.low_watermark"},
        BadCase{"[server]\nsocket = \"relative.sock\"\n", {}, "server.socket"},
        BadCase{"[server]\nsocket_mode = \"999\"\n", {}, "server.socket_mode"},
        BadCase{"[server]\ntcp_address = \"0.0.0.0:7470\"\n", {}, "server.tcp_address"},
        BadCase{"[server]\ntls_cert_file = \"c.pem\"\n", {}, "server.tls_key_file"},
        BadCase{"[l3]\nenabled = true\n", {}, "l3.path"},
        BadCase{"[log]\nlevel = \"loud\"\n", {}, "log.level"},
        BadCase{"[sessions]\nmax_sessions = 0\n", {}, "sessions.max_sessions"},
        BadCase{"x = [\n", {}, "kvstrata_config_test."},
        BadCase{"", {"l1.nope=1"}, "l1.nope"},
        BadCase{"", {"noequals"}, "noequals"},
        BadCase{"", {"sessions.max_sessions=many"}, "sessions.max_sessions"},
        BadCase{"", {"l2.enabled=maybe"}, "l2.enabled"},
        BadCase{"", {"l2.write_policy=write-around"}, "l2.write_policy"},
        BadCase{"", {"l2.low_watermark=0.99"}, "l2.low_watermark"},
        BadCase{"", {"l3.eviction_policy=arc"}, "l3.eviction_policy"},
        BadCase{"", {"l2.io_threads=0"}, "l2.io_threads"},
        BadCase{"", {"l3.fsync=always"}, "l3.fsync"},
        BadCase{"", {"l3.eviction_interval_ms=5"}, "l3.eviction_interval_ms"},
        BadCase{"", {"l3.audit_interval_s=10"}, "l3.audit_interval_s"},
        BadCase{"", {"l3.follow_interval_ms=50"}, "l3.follow_interval_ms"},
        BadCase{"", {"l3.follow_interval_ms=-1"}, "l3.follow_interval_ms"},
        BadCase{"", {"l3.presence_check=maybe"}, "l3.presence_check"},
        BadCase{"", {"l1.promotion_wait_ms=-1"}, "l1.promotion_wait_ms"},
        BadCase{"", {"gpu.copy_streams=0"}, "gpu.copy_streams"},
        BadCase{"", {"gpu.copy_streams=9"}, "gpu.copy_streams"},
        BadCase{"", {"gpu.copy_strategy=fast"}, "gpu.copy_strategy"},
        BadCase{"", {"l2.path=relative/l2"}, "l2.path"},
        BadCase{"", {"l3.enabled=true", "l3.path=shared"}, "l3.path"},
        BadCase{"tenants = 3\n", {}, "tenants"},
        BadCase{"[[tenants]]\nuids = [1]\n", {}, "tenants[0].name"},
        BadCase{"[[tenants]]\nname = \"Team A\"\nuids = [1]\n", {}, "tenants[0].name"},
        BadCase{"[[tenants]]\nname = \"default\"\nuids = [1]\n", {}, "tenants[0].name"},
        BadCase{"[[tenants]]\nname = \"a\"\n", {}, "tenants[0]"},
        BadCase{"[[tenants]]\nname = \"a\"\nuids = [-1]\n", {}, "tenants[0].uids"},
        BadCase{"[[tenants]]\nname = \"a\"\ngids = \"7\"\n", {}, "tenants[0].gids"},
        BadCase{"[[tenants]]\nname = \"a\"\nuids = [1]\nrole = \"x\"\n", {}, "tenants[0].role"},
        BadCase{"[[tenants]]\nname = \"a\"\nuids = [1]\nadmin = \"yes\"\n", {}, "tenants[0].admin"},
        BadCase{"[[tenants]]\nname = \"a\"\ntoken_file = \"t\"\n", {}, "tenants[0].token_file"},
        BadCase{"[[tenants]]\nname = \"a\"\nuids = [1]\nl1_capacity = \"lots\"\n",
                {},
                "tenants[0].l1_capacity"},
        BadCase{"[[tenants]]\nname = \"a\"\nuids = [1]\nl1_capacity = \"1KiB\"\n",
                {},
                "tenants[0].l1_capacity"},
        BadCase{"[[tenants]]\nname = \"a\"\nuids = [1]\n[[tenants]]\nname = \"a\"\n"
                "gids = [2]\n",
                {},
                "tenants[1].name"},
        BadCase{"[server]\nmetrics_address = \"0.0.0.0:99999\"\n", {}, "server.metrics_address"},
        BadCase{"", {"server.metrics_address=localhost"}, "server.metrics_address"},
        BadCase{"", {"server.metrics_address=::1:9464"}, "server.metrics_address"},
        BadCase{"", {"server.metrics_address=:9464"}, "server.metrics_address"},
        BadCase{"",
                {"server.tcp_address=0.0.0.0:0", "server.auth_token_file=/t"},
                "server.tcp_address"},
        BadCase{"",
                {"server.tcp_address=[::1:7470", "server.auth_token_file=/t"},
                "server.tcp_address"},
        BadCase{"", {"events.endpoint=tcp://*:70000"}, "events.endpoint"},
        BadCase{"", {"events.endpoint=localhost:5557"}, "events.endpoint"},
        BadCase{"", {"events.replay_endpoint=tcp://*:x"}, "events.replay_endpoint"}};
    cases.insert(cases.end(), kMoreBadCases.begin(), kMoreBadCases.end());
    return cases;
  }();
  return all;
}

INSTANTIATE_TEST_SUITE_P(Cases, BadConfigTest, ::testing::ValuesIn(BadCases()),
                         [](const auto& info) { return "case" + std::to_string(info.index); });

TEST(ConfigLoaderTest, EveryKeyHasABadValueCase) {
  absl::StatusOr<Config> config = LoadConfig("", {});
  ASSERT_TRUE(config.ok()) << config.status();
  // Every tier's keys are read by one reader (config_extract.cc's ReadTier): a case for a
  // key of one tier ("l2.capacity") covers that key of every tier (".capacity").
  auto tier_key = [&](const std::string& key) -> std::string {
    const size_t dot = key.find('.');
    return dot != std::string::npos && FindTier(*config, key.substr(0, dot)) != nullptr
               ? key.substr(dot)
               : std::string();
  };
  for (const ConfigEntry& entry : config->entries) {
    if (entry.key.starts_with("tenants")) continue;  // [[tenants]]: their own cases above
    const std::string suffix = tier_key(entry.key);
    bool covered =
        kCheckedAtStart.contains(entry.key) ||
        std::any_of(BadCases().begin(), BadCases().end(), [&](const BadCase& c) {
          return c.names == entry.key || (!suffix.empty() && tier_key(c.names) == suffix);
        });
    EXPECT_TRUE(covered) << entry.key << ": add a BadCase with a bad value of this key";
  }
}

TEST(ConfigLoaderTest, AValueOfTheWrongTypeNamesTheKeyForEveryKey) {
  absl::StatusOr<Config> config = LoadConfig("", {});
  ASSERT_TRUE(config.ok()) << config.status();
  for (const ConfigEntry& entry : config->entries) {
    if (entry.key.starts_with("tenants")) continue;
    size_t dot = entry.key.find('.');
    std::string file =
        "[" + entry.key.substr(0, dot) + "]\n" + entry.key.substr(dot + 1) + " = [1]\n";
    absl::StatusOr<Config> bad = LoadConfig(WriteTemp(file), {});
    ASSERT_FALSE(bad.ok()) << entry.key;
    EXPECT_THAT(std::string(bad.status().message()), HasSubstr("'" + entry.key + "'"));
  }
}

TEST(ConfigLoaderTest, ABareNumberIsBytesInAFileToo) {
  std::string path = WriteTemp(
      "[l1]\ncapacity = 4194304\nslab_size = 1048576\n[l2]\ncapacity = 2097152\n"
      "[[tenants]]\nname = \"a\"\nuids = [1]\nl1_capacity = 1048576\n");
  absl::StatusOr<Config> config = LoadConfig(path, {"l1.capacity=8388608"});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->l1.capacity_bytes, 8ULL << 20);
  EXPECT_EQ(config->l1.slab_bytes, 1ULL << 20);
  EXPECT_EQ(FindTier(*config, "l2")->capacity_bytes, 2ULL << 20);
  EXPECT_EQ(config->tenants[0].l1_capacity, 1ULL << 20);
  // Only byte sizes take a bare number for a string.
  absl::StatusOr<Config> bad = LoadConfig(WriteTemp("[log]\nlevel = 3\n"), {});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              AllOf(HasSubstr("log.level"), HasSubstr("the integer 3"), HasSubstr("a string")));
}

TEST(ConfigLoaderTest, TypeErrorsSayInWordsWhatIsExpected) {
  absl::StatusOr<Config> flag = LoadConfig("", {"l2.enabled=flase"});
  ASSERT_FALSE(flag.ok());
  EXPECT_THAT(std::string(flag.status().message()),
              AllOf(HasSubstr("l2.enabled"), HasSubstr("'flase'"),
                    HasSubstr("a boolean (true or false)"), Not(HasSubstr("a 6"))));
  absl::StatusOr<Config> file = LoadConfig(
      WriteTemp("[l2]\nenabled = \"yes\"\n[l1]\ncapacity = true\nhigh_watermark = \"x\"\n"), {});
  ASSERT_FALSE(file.ok());
  std::string message(file.status().message());
  EXPECT_THAT(message, AllOf(HasSubstr("'l2.enabled': got the string \"yes\": expected a boolean"),
                             HasSubstr("'l1.capacity': got the boolean true: expected a size"),
                             HasSubstr("'l1.high_watermark': got the string \"x\": expected a "
                                       "number")));
  EXPECT_THAT(message, Not(HasSubstr("expected a 3")));
  absl::StatusOr<Config> count = LoadConfig("", {"sessions.max_sessions=many"});
  EXPECT_THAT(std::string(count.status().message()), HasSubstr("'many' is not an integer"));
}

TEST(ConfigLoaderTest, EveryMistakeIsReportedAtOnce) {
  std::string path = WriteTemp(
      "[l1]\ncapasity = \"1GiB\"\neviction_policy = \"mru\"\n"
      "[server]\nmetrics_address = \"0.0.0.0:99999\"\n[nosuch]\nx = 1\n");
  absl::StatusOr<Config> config =
      LoadConfig(path, {"l2.enabled=flase", "sessions.max_sessions=0", "l2.capacity=3XB"});
  ASSERT_FALSE(config.ok());
  std::string message(config.status().message());
  EXPECT_THAT(message, HasSubstr("7 configuration errors:"));
  for (const char* named : {"l1.capasity", "'mru'", "'0.0.0.0:99999'", "nosuch", "'flase'",
                            "sessions.max_sessions", "l2.capacity"}) {
    EXPECT_THAT(message, HasSubstr(named));
  }
}

TEST(ConfigLoaderTest, AnUnknownUnitListsEveryAcceptedUnit) {
  absl::StatusOr<Config> config = LoadConfig("", {"l1.capacity=4XB"});
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(std::string(config.status().message()),
              AllOf(HasSubstr("l1.capacity"), HasSubstr("'4XB'"), HasSubstr("GiB"), HasSubstr("GB"),
                    HasSubstr("TB")));
}

TEST(ConfigLoaderTest, AddressesThatAreAccepted) {
  absl::StatusOr<Config> config =
      LoadConfig("", {"server.metrics_address=127.0.0.1:0", "server.tcp_address=[::1]:7470",
                      "server.auth_token_file=/etc/t", "events.endpoint=tcp://*:5557",
                      "events.replay_endpoint=ipc:///tmp/kvs.replay"});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->server.tcp_address, "[::1]:7470");
  EXPECT_TRUE(LoadConfig("", {"server.metrics_address=[::]:9464", "events.endpoint=tcp://*:*",
                              "events.replay_endpoint=inproc://replay"})
                  .ok());
}

TEST(ConfigLoaderTest, ADirectoryIsNotAConfigFile) {
  absl::StatusOr<Config> config = LoadConfig(::testing::TempDir(), {});
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(config.status().message()), HasSubstr("is a directory"));
}

TEST(ConfigLoaderTest, LowerTierKeysAreRead) {
  absl::StatusOr<Config> config = LoadConfig(
      "", {"l2.write_policy=write-back", "l2.admission_threshold=3", "l3.enabled=true",
           "l3.path=/mnt/shared", "l3.negative_cache_ms=500", "l3.fsync=file-and-dir",
           "l3.probe_timeout_ms=7", "l3.follow_interval_ms=0", "l3.presence_check=sync"});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(FindTier(*config, "l3")->follow_interval_ms, 0);
  EXPECT_EQ(FindTier(*config, "l3")->presence_check, "sync");
  EXPECT_TRUE(FindTier(*config, "l2")->write_back);
  EXPECT_EQ(FindTier(*config, "l2")->write_down_min_hits, 3);
  EXPECT_FALSE(FindTier(*config, "l3")->write_back);
  EXPECT_EQ(FindTier(*config, "l3")->path, "/mnt/shared");
  EXPECT_EQ(FindTier(*config, "l3")->negative_cache_ms, 500);
  EXPECT_EQ(FindTier(*config, "l3")->fsync, "file-and-dir");
  EXPECT_EQ(FindTier(*config, "l3")->probe_timeout_ms, 7);
}

TEST(ConfigLoaderTest, AdmissionKnobsHaveTheirOwnNames) {
  absl::StatusOr<Config> config = LoadConfig(
      "", {"l1.admission_min_lookups=2", "l2.write_down_min_hits=4", "l3.write_down_min_hits=5"});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->l1.admission_min_lookups, 2);
  EXPECT_EQ(FindTier(*config, "l2")->write_down_min_hits, 4);
  EXPECT_EQ(FindTier(*config, "l3")->write_down_min_hits, 5);
  EXPECT_TRUE(config->warnings.empty());
}

TEST(ConfigLoaderTest, TheOldAdmissionKeyStillWorksWithAWarning) {
  std::string path = WriteTemp("[l1]\nadmission_threshold = 2\n[l3]\nadmission_threshold = 6\n");
  absl::StatusOr<Config> config = LoadConfig(path, {"l2.admission_threshold=4"});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->l1.admission_min_lookups, 2);
  EXPECT_EQ(FindTier(*config, "l2")->write_down_min_hits, 4);
  EXPECT_EQ(FindTier(*config, "l3")->write_down_min_hits, 6);
  ASSERT_EQ(config->warnings.size(), 3u);
  EXPECT_THAT(config->warnings[0],
              HasSubstr("'l1.admission_threshold' is deprecated: use 'l1.admission_min_lookups'"));
  EXPECT_THAT(config->warnings[1],
              HasSubstr("'l3.admission_threshold' is deprecated: use 'l3.write_down_min_hits'"));
  EXPECT_THAT(config->warnings[2],
              HasSubstr("'l2.admission_threshold' is deprecated: use 'l2.write_down_min_hits'"));
  // The value shows under its current name.
  bool shown = false;
  for (const ConfigEntry& e : config->entries) {
    if (e.key == "l2.write_down_min_hits") shown = e.value == "4" && e.source == "flag";
  }
  EXPECT_TRUE(shown);
}

TEST(ConfigLoaderTest, TenantsAreRead) {
  std::string path = WriteTemp(
      "[[tenants]]\nname = \"team-a\"\nuids = [1001, 1002]\nshared_memory = true\n"
      "l1_capacity = \"2GiB\"\n"
      "[[tenants]]\nname = \"ops\"\ngids = [0]\ntoken_file = \"/etc/ops.token\"\nadmin = true\n");
  absl::StatusOr<Config> config = LoadConfig(path, {});
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_EQ(config->tenants.size(), 2u);
  EXPECT_EQ(config->tenants[0].name, "team-a");
  EXPECT_EQ(config->tenants[0].uids, (std::vector<uint32_t>{1001, 1002}));
  EXPECT_TRUE(config->tenants[0].shared_memory);
  EXPECT_EQ(config->tenants[0].l1_capacity, 2ULL << 30);
  EXPECT_EQ(config->tenants[1].l1_capacity, 0u);
  EXPECT_FALSE(config->tenants[0].admin);
  EXPECT_EQ(config->tenants[1].gids, (std::vector<uint32_t>{0}));
  EXPECT_EQ(config->tenants[1].token_file, "/etc/ops.token");
  EXPECT_TRUE(config->tenants[1].admin);
  EXPECT_FALSE(config->tenants[1].shared_memory);
  EXPECT_TRUE(LoadConfig("", {})->tenants.empty());  // single-tenant by default
}

TEST(ConfigLoaderTest, TcpWithOnlyATenantTokenIsAccepted) {
  std::string path = WriteTemp(
      "[server]\ntcp_address = \"127.0.0.1:7470\"\n"
      "[[tenants]]\nname = \"remote\"\ntoken_file = \"/etc/remote.token\"\n");
  absl::StatusOr<Config> config = LoadConfig(path, {});
  EXPECT_TRUE(config.ok()) << config.status();
}

TEST(ConfigLoaderTest, MissingFileIsNotFound) {
  EXPECT_EQ(LoadConfig("/nonexistent/kvstrata.toml", {}).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace kvstrata
