// The KV-event topic's <id> (events.pod_id / events.node_name / $NODE_NAME): llm-d's
// node-wide form "node:<node name>" and today's host-name default.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

#include <unistd.h>

#include "daemon/config/config_loader.h"
#include "tests/unit/config/config_test_util.h"

namespace kvstrata {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// Sets (or with nullptr unsets) $NODE_NAME for one test; restores it after.
class ScopedNodeName {
 public:
  explicit ScopedNodeName(const char* value) {
    if (const char* old = std::getenv("NODE_NAME"); old != nullptr) old_ = old;
    if (value != nullptr) {
      setenv("NODE_NAME", value, 1);
    } else {
      unsetenv("NODE_NAME");
    }
  }
  ~ScopedNodeName() {
    if (old_.has_value()) {
      setenv("NODE_NAME", old_->c_str(), 1);
    } else {
      unsetenv("NODE_NAME");
    }
  }

 private:
  std::optional<std::string> old_;
};

std::string EntryValue(const Config& config, const std::string& key) {
  const ConfigEntry* e = FindEntry(config, key);
  return e == nullptr ? "missing" : e->value;
}

TEST(EventsConfigTest, NodeNameFromTheEnvironmentGivesTheNodeWideTopicId) {
  ScopedNodeName env("gpu-node-7");  // the DaemonSet's downward-API NODE_NAME
  absl::StatusOr<Config> config = LoadConfig("", {});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->events.node_name, "gpu-node-7");
  EXPECT_EQ(config->events.pod_id, "node:gpu-node-7");
  // `kvstrata config` shows the values in use.
  EXPECT_EQ(EntryValue(*config, "events.pod_id"), "node:gpu-node-7");
  EXPECT_EQ(EntryValue(*config, "events.node_name"), "gpu-node-7");
}

TEST(EventsConfigTest, TheKeysBeatTheEnvironment) {
  ScopedNodeName env("gpu-node-7");
  absl::StatusOr<Config> node = LoadConfig("", {"events.node_name=worker-1"});
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_EQ(node->events.pod_id, "node:worker-1");
  absl::StatusOr<Config> pod = LoadConfig("", {"events.pod_id=vllm-0"});
  ASSERT_TRUE(pod.ok()) << pod.status();
  EXPECT_EQ(pod->events.pod_id, "vllm-0");
  EXPECT_EQ(pod->events.node_name, "");
}

TEST(EventsConfigTest, WithoutANodeNameThePodIdIsTheHostName) {
  ScopedNodeName env(nullptr);
  absl::StatusOr<Config> config = LoadConfig("", {});
  ASSERT_TRUE(config.ok()) << config.status();
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  EXPECT_EQ(config->events.pod_id, host);
  EXPECT_EQ(config->events.node_name, "");
  ScopedNodeName empty("");  // set but empty: no node name either
  EXPECT_EQ(LoadConfig("", {})->events.pod_id, host);
}

TEST(EventsConfigTest, BadNodeNamesNameTheKey) {
  ScopedNodeName env("a@b");
  absl::StatusOr<Config> from_env = LoadConfig("", {});
  ASSERT_FALSE(from_env.ok());
  EXPECT_THAT(from_env.status().message(),
              AllOf(HasSubstr("events.node_name"), HasSubstr("$NODE_NAME"), HasSubstr("'@'")));
  absl::StatusOr<Config> both =
      LoadConfig("", {"events.node_name=worker-1", "events.pod_id=vllm-0"});
  ASSERT_FALSE(both.ok());
  EXPECT_THAT(both.status().message(), HasSubstr("events.node_name"));
}

}  // namespace
}  // namespace kvstrata
