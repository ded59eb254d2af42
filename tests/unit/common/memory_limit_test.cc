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

TEST(MemoryLimitTest, ParsesCgroupV1MemoryLines) {
  EXPECT_EQ(ParseCgroupV1MemoryPath("12:pids:/docker/abc\n7:memory:/docker/abc\n0::/\n"),
            "/docker/abc");
  EXPECT_EQ(ParseCgroupV1MemoryPath("4:cpuacct,memory:/kubepods/pod1\n"), "/kubepods/pod1");
  EXPECT_EQ(ParseCgroupV1MemoryPath("0::/system.slice/kvstratad.service\n"), std::nullopt);
  EXPECT_EQ(ParseCgroupV1MemoryPath("3:memory_recursiveprot:/x\n"), std::nullopt);
  EXPECT_EQ(ParseLimitInBytes("3221225472\n"), 3221225472ULL);
  EXPECT_EQ(ParseLimitInBytes("9223372036854771712\n"), std::nullopt);  // no limit
  EXPECT_EQ(ParseLimitInBytes("-1\n"), std::nullopt);
}

// Issue 46: an L1 larger than a cgroup v1 limit got the daemon OOM-killed while populating.
TEST(MemoryLimitTest, CgroupV1LimitOfTheMemoryControllersCgroupAndItsAncestors) {
  fs::path root = fs::path(::testing::TempDir()) / ("kvs-memlimit-v1-" + std::to_string(getpid()));
  fs::remove_all(root);
  Write(root / "proc/meminfo", "MemTotal: 16777216 kB\n");  // 16 GiB
  Write(root / "proc/self/cgroup",
        "11:pids:/kubepods/pod1/c1\n"
        "9:memory:/kubepods/pod1/c1\n1:name=systemd:/kubepods/pod1/c1\n");
  Write(root / "cg/memory/kubepods/pod1/c1/memory.limit_in_bytes", "9223372036854771712\n");
  Write(root / "cg/memory/kubepods/pod1/memory.limit_in_bytes", "2147483648\n");  // 2 GiB
  Write(root / "cg/memory/memory.limit_in_bytes", "9223372036854771712\n");
  MemoryLimit limit = ReadMemoryLimit((root / "proc").string(), (root / "cg").string());
  EXPECT_EQ(limit.bytes, 2147483648ULL);
  EXPECT_NE(limit.source.find("pod1/memory.limit_in_bytes"), std::string::npos) << limit.source;

  // In a container the hierarchy is mounted at the container's own cgroup: its path from
  // /proc/self/cgroup is not there, and the limit is the mount point's.
  fs::remove_all(root / "cg");
  Write(root / "cg/memory/memory.limit_in_bytes", "1073741824\n");  // 1 GiB
  limit = ReadMemoryLimit((root / "proc").string(), (root / "cg").string());
  EXPECT_EQ(limit.bytes, 1ULL << 30);

  // No limit at all: MemTotal.
  Write(root / "cg/memory/memory.limit_in_bytes", "9223372036854771712\n");
  limit = ReadMemoryLimit((root / "proc").string(), (root / "cg").string());
  EXPECT_EQ(limit.bytes, 16ULL << 30);
  fs::remove_all(root);
}

TEST(MemoryLimitTest, ThisProcessHasALimit) { EXPECT_GT(ReadMemoryLimit().bytes, 0u); }

}  // namespace
}  // namespace kvstrata
