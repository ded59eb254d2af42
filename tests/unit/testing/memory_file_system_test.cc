// What MemoryFileSystem adds to the BlockFileSystem contract (which
// tests/unit/tiers/block_file_system_contract_test.cc checks): a capacity that stands for a
// full disk, modification times from its clock, and a test's direct view of the bytes.
#include "daemon/testing/memory_file_system.h"

#include <string>

#include "daemon/testing/fake_clock.h"
#include "daemon/tiers/block_file_format.h"
#include "gtest/gtest.h"

namespace kvstrata {
namespace {

constexpr char kFp[] = "0123456789abcdef0123456789abcdef";

absl::Status WriteBlock(BlockFileSystem& fs, const std::string& path, const std::string& payload) {
  absl::StatusOr<BlockHeader> header = MakeBlockHeader(kFp, "k", payload, 0);
  if (!header.ok()) return header.status();
  return fs.WriteBlock(path, *header, payload, {}).status();
}

TEST(MemoryFileSystemTest, AWriteThatDoesNotFitIsAFullDisk) {
  MemoryFileSystem fs;
  const uint64_t block = BlockFileBytes(4096);
  fs.SetCapacity(2 * block);
  ASSERT_TRUE(WriteBlock(fs, "/d/a", std::string(4096, 'a')).ok());
  EXPECT_EQ(fs.FreeBytes("/d"), block);
  ASSERT_TRUE(WriteBlock(fs, "/d/b", std::string(4096, 'b')).ok());
  EXPECT_EQ(fs.FreeBytes("/d"), 0u);
  EXPECT_TRUE(absl::IsResourceExhausted(WriteBlock(fs, "/d/c", std::string(4096, 'c'))));
  EXPECT_FALSE(fs.Stat("/d/c").has_value());                         // Nothing left behind.
  ASSERT_TRUE(WriteBlock(fs, "/d/b", std::string(4096, 'B')).ok());  // A rewrite fits.
  ASSERT_TRUE(fs.Remove("/d/a"));
  EXPECT_TRUE(WriteBlock(fs, "/d/c", std::string(4096, 'c')).ok());
}

TEST(MemoryFileSystemTest, ModificationTimesComeFromItsClock) {
  FakeClock clock;
  MemoryFileSystem fs(&clock);
  ASSERT_TRUE(WriteBlock(fs, "/d/a", std::string(4096, 'a')).ok());
  EXPECT_EQ(fs.Stat("/d/a")->modified, clock.Now());
  clock.Advance(absl::Minutes(5));
  EXPECT_EQ(fs.Stat("/d/a")->modified, clock.Now() - absl::Minutes(5));
  fs.Touch("/d/a");
  EXPECT_EQ(fs.Stat("/d/a")->modified, clock.Now());
}

TEST(MemoryFileSystemTest, ATestSeesAndChangesTheBytes) {
  MemoryFileSystem fs;
  const std::string payload(4096, 'p');
  ASSERT_TRUE(WriteBlock(fs, "/d//a/", payload).ok());  // "//" and a trailing '/' ignored
  std::optional<std::string> bytes = fs.Contents("/d/a");
  ASSERT_TRUE(bytes.has_value());
  EXPECT_EQ(bytes->size(), BlockFileBytes(payload.size()));
  EXPECT_EQ(bytes->substr(kBlockHeaderBytes), payload);
  (*bytes)[kBlockHeaderBytes + 7] ^= 0x5a;
  ASSERT_TRUE(fs.SetContents("/d/a", *bytes));
  std::string got(payload.size(), '\0');
  EXPECT_EQ(fs.ReadBlock("/d/a", kFp, "k", absl::MakeSpan(got)).miss, BlockMiss::kBadChecksum);
  EXPECT_FALSE(fs.SetContents("/missing/a", "x"));  // No parent directory.
  EXPECT_FALSE(fs.Contents("/d").has_value());      // A directory.
}

}  // namespace
}  // namespace kvstrata
