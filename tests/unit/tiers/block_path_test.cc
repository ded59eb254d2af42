#include "daemon/tiers/block_path.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace kvstrata {
namespace {

constexpr char kFp[] = "0123456789abcdef0123456789abcdef";

TEST(BlockPathTest, BuildsRootFingerprintPrefixDirsAndHexKey) {
  absl::StatusOr<std::string> path = BlockFilePath("/data/l2/", kFp, std::string("\x01\xab", 2));
  ASSERT_TRUE(path.ok()) << path.status();
  const std::string prefix = std::string("/data/l2/") + kFp + "/";
  ASSERT_EQ(path->substr(0, prefix.size()), prefix);
  const std::string rest = path->substr(prefix.size());
  ASSERT_EQ(rest.size(), std::string("xx/yy/01ab.kv").size()) << rest;
  EXPECT_EQ(rest[2], '/');
  EXPECT_EQ(rest[5], '/');
  EXPECT_EQ(rest.substr(6), "01ab.kv");
  EXPECT_EQ(*path, *BlockFilePath("/data/l2", kFp, std::string("\x01\xab", 2)));
  EXPECT_EQ(*NamespaceFilePath("/r", kFp), std::string("/r/") + kFp + "/namespace.json");
}

TEST(BlockPathTest, SequentialKeysSpreadOverPrefixDirs) {
  std::set<std::string> dirs;
  for (int i = 0; i < 256; ++i) {
    const std::string path = *BlockFilePath("/r", kFp, "key" + std::to_string(i));
    dirs.insert(path.substr(0, path.rfind('/')));
  }
  EXPECT_GT(dirs.size(), 200u);
}

TEST(BlockPathTest, ValidatesFingerprintKeyAndRoot) {
  EXPECT_EQ(BlockFilePath("/r", "0123456789ABCDEF0123456789abcdef", "k").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BlockFilePath("/r", "0123", "k").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BlockFilePath("/r", "../456789abcdef0123456789abcdef", "k").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BlockFilePath("/r", kFp, "").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BlockFilePath("/r", kFp, std::string(33, 'a')).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BlockFilePath("", kFp, "k").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(BlockFilePath("/r", kFp, std::string(32, '\0')).ok());
  EXPECT_EQ(HexKey(std::string("\x00\xff", 2)), "00ff");
}

}  // namespace
}  // namespace kvstrata
