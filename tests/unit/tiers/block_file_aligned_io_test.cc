// The zero-copy paths of block_file_io: a payload in 4 KiB-aligned memory (an L1 slot) is
// written with one pwritev and no staging copy, and ReadBlockFileInto an aligned
// destination reads header and payload in one O_DIRECT preadv. Both must give the same
// file bytes and the same verdicts as the staged / header-first paths.
#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "daemon/tiers/block_file_io.h"
#include "daemon/tiers/block_path.h"
#include "tests/unit/tiers/tier_test_data.h"

namespace kvstrata {
namespace {

namespace fs = std::filesystem;

struct Free {
  void operator()(char* p) const { std::free(p); }
};
using Aligned = std::unique_ptr<char, Free>;

Aligned AlignedCopy(absl::string_view bytes) {
  void* raw = nullptr;
  EXPECT_EQ(::posix_memalign(&raw, 4096, std::max<size_t>(bytes.size(), 1) + 4096), 0);
  std::memcpy(raw, bytes.data(), bytes.size());
  return Aligned(static_cast<char*>(raw));
}

std::string FileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

class AlignedIoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = absl::StrCat(::testing::TempDir(), "/kvstrata_tiers_aligned_", ::getpid(), "_",
                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  std::string Path(absl::string_view key) { return *BlockFilePath(root_, kFp, key); }
  std::string root_;
};

TEST_F(AlignedIoTest, AlignedAndStagedWritesGiveTheSameFile) {
  for (size_t size :
       {size_t{100}, size_t{4096}, size_t{3 * 4096 + 17}, size_t{(2 << 20) + 1}, size_t{5 << 20}}) {
    const std::string payload = Payload(size, static_cast<int>(size));
    const BlockHeader header = *MakeBlockHeader(kFp, "k", payload, 5);
    Aligned aligned = AlignedCopy(payload);
    std::string unaligned = " " + payload;  // payload at an odd address: the staged path
    const std::string a = Path("aligned"), b = Path("staged");
    ASSERT_TRUE(WriteBlockFile(a, header, absl::string_view(aligned.get(), size)).ok()) << size;
    ASSERT_TRUE(WriteBlockFile(b, header, absl::string_view(unaligned).substr(1)).ok()) << size;
    const std::string bytes = FileBytes(a);
    EXPECT_EQ(bytes.size(), BlockFileBytes(size));
    EXPECT_TRUE(bytes == FileBytes(b)) << "aligned and staged files differ, size " << size;
    EXPECT_EQ(bytes.substr(kBlockHeaderBytes, size), payload) << size;
    EXPECT_EQ(bytes.find_first_not_of('\0', kBlockHeaderBytes + size), std::string::npos)
        << "padding is not zero, size " << size;
    fs::remove(a);
    fs::remove(b);
  }
}

TEST_F(AlignedIoTest, ReadIntoAnAlignedDestinationIsByteExact) {
  for (size_t size : {size_t{4096}, size_t{3 * 4096 + 17}, size_t{(2 << 20) + 1}}) {
    const std::string payload = Payload(size, 3);
    const std::string path = Path(kKey);
    Aligned src = AlignedCopy(payload);
    ASSERT_TRUE(WriteBlockFile(path, *MakeBlockHeader(kFp, kKey, payload, 1),
                               absl::string_view(src.get(), size))
                    .ok());
    Aligned dest = AlignedCopy(std::string(size, 'x'));
    BlockReadResult result = ReadBlockFileInto(path, kFp, kKey, absl::MakeSpan(dest.get(), size));
    ASSERT_TRUE(result.hit()) << result.detail;
    EXPECT_EQ(std::memcmp(dest.get(), payload.data(), size), 0) << size;
    // The same through an unaligned destination (the header-first path).
    std::string odd(size + 1, 'y');
    result = ReadBlockFileInto(path, kFp, kKey, absl::MakeSpan(odd.data() + 1, size));
    ASSERT_TRUE(result.hit()) << result.detail;
    EXPECT_EQ(odd.substr(1), payload);
  }
}

// Each class of bad file gives the same miss through the one-read path as through the
// header-first path.
TEST_F(AlignedIoTest, BadFilesAreTheSameMissThroughTheOneReadPath) {
  const size_t size = 3 * 4096 + 17;
  const std::string payload = Payload(size, 9);
  Aligned dest = AlignedCopy(std::string(size, 'x'));
  auto miss = [&](const std::string& path, absl::string_view key) {
    BlockReadResult aligned = ReadBlockFileInto(path, kFp, key, absl::MakeSpan(dest.get(), size));
    std::string odd(size + 1, 'y');
    BlockReadResult other = ReadBlockFileInto(path, kFp, key, absl::MakeSpan(odd.data() + 1, size));
    EXPECT_FALSE(aligned.hit());
    EXPECT_EQ(BlockMissName(aligned.miss), BlockMissName(other.miss)) << aligned.detail;
    return aligned.miss;
  };
  const std::string path = Path(kKey);
  EXPECT_EQ(miss(path, kKey), BlockMiss::kAbsent);
  ASSERT_TRUE(WriteBlockFile(path, *MakeBlockHeader(kFp, kKey, payload, 1), payload).ok());
  EXPECT_EQ(miss(path, "another-key"), BlockMiss::kWrongKey);
  std::string bytes = FileBytes(path);
  bytes[kBlockHeaderBytes + 5] ^= 1;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  EXPECT_EQ(miss(path, kKey), BlockMiss::kBadChecksum);
  bytes[kBlockHeaderBytes + 5] ^= 1;
  bytes[40] ^= 1;  // inside the key: the header checksum no longer matches
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  EXPECT_EQ(miss(path, kKey), BlockMiss::kBadHeader);
  bytes[40] ^= 1;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes.substr(0, bytes.size() - 4096);
  EXPECT_EQ(miss(path, kKey), BlockMiss::kTruncated);
  // A block of another size: the file size differs, the header-first path says why.
  const std::string small = Payload(100, 1);
  ASSERT_TRUE(WriteBlockFile(path, *MakeBlockHeader(kFp, kKey, small, 1), small).ok());
  EXPECT_EQ(miss(path, kKey), BlockMiss::kBadHeader);
}

TEST(WriteVecFullyAtTest, WritesEverySegmentAndFallsBackWhenODirectRefusesThem) {
  const std::string path =
      absl::StrCat(::testing::TempDir(), "/kvstrata_tiers_writev_", ::getpid());
  const std::string a = Payload(4096, 1), b = Payload(8192, 2), c = Payload(4096, 3);
  Aligned pa = AlignedCopy(a), pb = AlignedCopy(b);
  std::string odd = " " + c;  // an unaligned segment: O_DIRECT refuses it with EINVAL
  for (bool try_direct : {false, true}) {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | (try_direct ? O_DIRECT : 0), 0644);
    bool direct = try_direct;
    if (fd < 0 && try_direct) {  // A filesystem without O_DIRECT.
      fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      direct = false;
    }
    ASSERT_GE(fd, 0);
    iovec iov[3] = {{pa.get(), a.size()}, {pb.get(), b.size()}, {odd.data() + 1, c.size()}};
    ASSERT_TRUE(internal::WriteVecFullyAt(fd, iov, 3, 4096, &direct).ok());
    ::close(fd);
    EXPECT_FALSE(direct) << "the unaligned segment should have turned O_DIRECT off";
    EXPECT_EQ(FileBytes(path), std::string(4096, '\0') + a + b + c);
  }
  ::unlink(path.c_str());
}

}  // namespace
}  // namespace kvstrata
