// Bad files are misses with the right reason and get quarantined; concurrent writers never
// tear a file; write errors map to statuses and leave no temp file.
#include <errno.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/tiers/block_file_io.h"
#include "daemon/tiers/block_path.h"
#include "tests/unit/tiers/tier_test_data.h"

namespace kvstrata {
namespace {

namespace fs = std::filesystem;

class CorruptionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = absl::StrCat(::testing::TempDir(), "/kvstrata_tiers_corrupt_", ::getpid(), "_",
                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    path_ = *BlockFilePath(root_, kFp, kKey);
  }
  void WriteGood(size_t size = 10000, absl::string_view fp = kFp, absl::string_view key = kKey) {
    const std::string payload = Payload(size, 1);
    ASSERT_TRUE(WriteBlockFile(path_, *MakeBlockHeader(fp, key, payload, 7), payload).ok());
  }
  void Mutate(const std::function<void(std::string&)>& change) {
    std::ifstream in(path_, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    in.close();
    change(bytes);
    std::ofstream(path_, std::ios::binary | std::ios::trunc) << bytes;
  }
  // The read misses for `reason`; quarantine then moves the file under .quarantine/.
  void ExpectQuarantinedMiss(BlockMiss reason) {
    std::string read;
    BlockReadResult result = ReadBlockFile(path_, kFp, kKey, &read);
    ASSERT_FALSE(result.hit());
    EXPECT_EQ(BlockMissName(result.miss), BlockMissName(reason)) << result.detail;
    ASSERT_TRUE(ShouldQuarantine(result.miss));
    absl::StatusOr<std::string> moved = Quarantine(path_, root_);
    ASSERT_TRUE(moved.ok()) << moved.status();
    EXPECT_FALSE(fs::exists(path_));
    EXPECT_TRUE(fs::exists(*moved));
    EXPECT_EQ(fs::path(*moved).parent_path(), fs::path(root_) / ".quarantine");
    EXPECT_EQ(ReadBlockFile(path_, kFp, kKey, &read).miss, BlockMiss::kAbsent);
  }

  std::string root_;
  std::string path_;
};

TEST_F(CorruptionTest, TruncationAtAnyOffsetIsTruncated) {
  for (size_t length : {size_t{0}, size_t{1}, size_t{7}, size_t{100}, size_t{4095}, size_t{4096},
                        size_t{5000}, size_t{14335}}) {
    WriteGood();
    Mutate([&](std::string& bytes) { bytes.resize(length); });
    SCOPED_TRACE(length);
    ExpectQuarantinedMiss(BlockMiss::kTruncated);
  }
}

TEST_F(CorruptionTest, AFlippedPayloadByteIsBadChecksum) {
  WriteGood();
  Mutate([](std::string& bytes) { bytes[4096 + 5000] ^= 1; });
  ExpectQuarantinedMiss(BlockMiss::kBadChecksum);
}

TEST_F(CorruptionTest, AFlippedHeaderByteIsBadHeader) {
  for (size_t offset : {size_t{3}, size_t{20}, size_t{40}, size_t{75}, size_t{100}, size_t{4000}}) {
    WriteGood();
    Mutate([&](std::string& bytes) { bytes[offset] ^= 0x10; });
    SCOPED_TRACE(offset);
    ExpectQuarantinedMiss(BlockMiss::kBadHeader);
  }
}

TEST_F(CorruptionTest, AnotherNamespacesBlockIsWrongNamespace) {
  WriteGood(10000, "ffffffffffffffffffffffffffffffff");
  ExpectQuarantinedMiss(BlockMiss::kWrongNamespace);
}

TEST_F(CorruptionTest, AnotherKeysBlockIsWrongKey) {
  WriteGood(10000, kFp, "other-key");
  ExpectQuarantinedMiss(BlockMiss::kWrongKey);
}

TEST_F(CorruptionTest, ForeignFilesAreBadHeader) {
  for (size_t size : {size_t{100}, size_t{4096}, size_t{20000}}) {
    ASSERT_TRUE(MakeDirectories(fs::path(path_).parent_path()).ok());
    std::ofstream(path_, std::ios::binary) << Payload(size, 9);
    SCOPED_TRACE(size);
    ExpectQuarantinedMiss(BlockMiss::kBadHeader);
  }
}

TEST_F(CorruptionTest, AFifoInPlaceOfABlockIsAMissAtOnce) {
  // Nobody ever writes the FIFO: an open without O_NONBLOCK would wait forever.
  ASSERT_TRUE(MakeDirectories(fs::path(path_).parent_path()).ok());
  ASSERT_EQ(::mkfifo(path_.c_str(), 0644), 0);
  const absl::Time start = absl::Now();
  std::string small;
  EXPECT_EQ(ReadBlockFile(path_, kFp, kKey, &small).miss, BlockMiss::kBadHeader);
  void* raw = nullptr;  // An aligned destination takes the O_DIRECT whole-file path first.
  ASSERT_EQ(::posix_memalign(&raw, 4096, 8192), 0);
  std::unique_ptr<char, decltype(&std::free)> aligned(static_cast<char*>(raw), &std::free);
  EXPECT_EQ(ReadBlockFileInto(path_, kFp, kKey, absl::MakeSpan(aligned.get(), 8192)).miss,
            BlockMiss::kBadHeader);
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  ExpectQuarantinedMiss(BlockMiss::kBadHeader);
}

TEST_F(CorruptionTest, ExtraTrailingBytesAreBadHeader) {
  WriteGood();
  Mutate([](std::string& bytes) { bytes += std::string(4096, '\0'); });
  ExpectQuarantinedMiss(BlockMiss::kBadHeader);
}

TEST_F(CorruptionTest, QuarantineRefusesPathsOutsideTheRoot) {
  EXPECT_EQ(Quarantine("/etc/passwd", root_).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Quarantine(root_ + "x/a.kv", root_).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Quarantine(root_ + "/gone.kv", root_).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(CorruptionTest, ConcurrentWritersOfOneKeyNeverTearAFile) {
  constexpr int kThreads = 4, kWrites = 50;
  std::atomic<int> failures{0}, hits{0};
  std::atomic<bool> done{false};
  std::vector<std::thread> writers;
  for (int t = 0; t < kThreads; ++t) {
    writers.emplace_back([&, t] {
      for (int i = 0; i < kWrites; ++i) {
        const std::string payload = Payload(8192 + 512 * t + i, t * 1000 + i);
        BlockWriteOptions options;
        options.fsync = FsyncPolicy::kNone;
        if (!WriteBlockFile(path_, *MakeBlockHeader(kFp, kKey, payload, 1), payload, options)
                 .ok()) {
          ++failures;
        }
      }
    });
  }
  std::thread reader([&] {
    std::string read;
    while (!done) {
      BlockReadResult result = ReadBlockFile(path_, kFp, kKey, &read);
      if (result.hit()) {
        ++hits;
      } else if (result.miss != BlockMiss::kAbsent) {
        ++failures;
      }
    }
  });
  for (auto& w : writers) w.join();
  done = true;
  reader.join();
  EXPECT_EQ(failures, 0);
  std::string read;
  EXPECT_TRUE(ReadBlockFile(path_, kFp, kKey, &read).hit());
  EXPECT_EQ(std::distance(fs::directory_iterator(fs::path(path_).parent_path()), {}), 1)
      << "temp files left behind";
  std::cout << "reader hits during the writes: " << hits << "\n";
}

TEST(BlockFileIoStatusTest, MapsErrnoToStatus) {
  EXPECT_EQ(ErrnoToStatus(ENOSPC, "w").code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ErrnoToStatus(EDQUOT, "w").code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ErrnoToStatus(EFBIG, "w").code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ErrnoToStatus(EIO, "w").code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(ErrnoToStatus(ENOENT, "w").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ErrnoToStatus(EROFS, "w").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(ErrnoToStatus(EBADF, "w").code(), absl::StatusCode::kInternal);
}

// A file-size limit makes write(2) fail with EFBIG part-way, like a full disk: the write is
// RESOURCE_EXHAUSTED, leaves no temp file and keeps the previous block intact.
TEST_F(CorruptionTest, AFailedWriteLeavesNoTempFileAndKeepsTheOldBlock) {
  WriteGood(1000);
  struct rlimit old_limit;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  auto old_handler = ::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old_limit;
  small.rlim_cur = 1 << 20;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  const std::string big = Payload(2 << 20, 5);
  absl::StatusOr<BlockWriteInfo> info =
      WriteBlockFile(path_, *MakeBlockHeader(kFp, kKey, big, 1), big);
  ::setrlimit(RLIMIT_FSIZE, &old_limit);
  ::signal(SIGXFSZ, old_handler);
  EXPECT_EQ(info.status().code(), absl::StatusCode::kResourceExhausted) << info.status();
  EXPECT_EQ(std::distance(fs::directory_iterator(fs::path(path_).parent_path()), {}), 1);
  std::string read;
  BlockReadResult result = ReadBlockFile(path_, kFp, kKey, &read);
  ASSERT_TRUE(result.hit()) << result.detail;
  EXPECT_EQ(*result.payload_bytes, 1000u);
}

}  // namespace
}  // namespace kvstrata
