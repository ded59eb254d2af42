// MemoryLimit: the parsers on real file shapes, and the reader on a fake /proc and cgroup tree.
#include "daemon/common/memory_limit.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace kvstrata {
namespace {

namespace fs = std::filesystem;

TEST(MemoryLimitTest, ParsesMeminfoCgroupAndMemoryMax) {
  EXPECT_EQ(ParseMemTotal("MemTotal:       24599120 kB\nMemFree:  1 kB\n"), 24599120ULL * 1024);
  EXPECT_EQ(ParseMemTotal("MemFree: 1 kB\n"), std::nullopt);
  EXPECT_EQ(ParseCgroupV2Path("0::/system.slice/kvstratad.service\n"),
            "/system.slice/kvstratad.service");
  EXPECT_EQ(ParseCgroupV2Path("12:memory:/docker/abc\n"), std::nullopt);  // cgroup v1 only
  EXPECT_EQ(ParseMemoryMax("3221225472\n"), 3221225472ULL);
  EXPECT_EQ(ParseMemoryMax("max\n"), std::nullopt);
}

void Write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

TEST(MemoryLimitTest, TheLeastOfMemTotalAndEveryAncestorsMemoryMax) {
  fs::path root = fs::path(::testing::TempDir()) / ("kvs-memlimit-" + std::to_string(getpid()));
  fs::remove_all(root);
  Write(root / "proc/meminfo", "MemTotal: 16777216 kB\n");  // 16 GiB
  Write(root / "proc/self/cgroup", "0::/kubepods/pod1/c1\n");
  Write(root / "cg/kubepods/pod1/c1/memory.max", "max\n");
  Write(root / "cg/kubepods/pod1/memory.max", "3221225472\n");  // 3 GiB: the pod's limit
  Write(root / "cg/kubepods/memory.max", "8589934592\n");
  MemoryLimit limit = ReadMemoryLimit((root / "proc").string(), (root / "cg").string());
  EXPECT_EQ(limit.bytes, 3221225472ULL);
  EXPECT_NE(limit.source.find("pod1/memory.max"), std::string::npos) << limit.source;
  fs::remove_all(root / "cg");
  limit = ReadMemoryLimit((root / "proc").string(), (root / "cg").string());
  EXPECT_EQ(limit.bytes, 16ULL << 30);
  fs::remove_all(root);
}

TEST(MemoryLimitTest, ThisProcessHasALimit) { EXPECT_GT(ReadMemoryLimit().bytes, 0u); }

}  // namespace
}  // namespace kvstrata
