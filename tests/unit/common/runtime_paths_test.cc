#include "daemon/common/runtime_paths.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <string>

namespace kvstrata {
namespace {

class RuntimePathsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : {"KVSTRATA_SOCKET", "RUNTIME_DIRECTORY", "XDG_RUNTIME_DIR"}) {
      unsetenv(name);
    }
  }
};

TEST_F(RuntimePathsTest, FallsBackToTmpPerUser) {
  EXPECT_EQ(DefaultSocketPath(), "/tmp/kvstrata-" + std::to_string(getuid()) + "/kvstrata.sock");
}

TEST_F(RuntimePathsTest, PrefersExplicitThenSystemdThenXdg) {
  setenv("XDG_RUNTIME_DIR", "/run/user/7", 1);
  EXPECT_EQ(DefaultSocketPath(), "/run/user/7/kvstrata/kvstrata.sock");
  setenv("RUNTIME_DIRECTORY", "/run/kvstrata", 1);
  EXPECT_EQ(DefaultSocketPath(), "/run/kvstrata/kvstrata.sock");
  setenv("KVSTRATA_SOCKET", "/x/y.sock", 1);
  EXPECT_EQ(DefaultSocketPath(), "/x/y.sock");
}

TEST(EndpointTest, PathsBecomeUnixTargets) {
  EXPECT_EQ(EndpointToTarget("/a/b.sock"), "unix:///a/b.sock");
  EXPECT_EQ(EndpointToTarget("unix:///a/b.sock"), "unix:///a/b.sock");
  EXPECT_EQ(EndpointToTarget("localhost:7470"), "localhost:7470");
}

}  // namespace
}  // namespace kvstrata
