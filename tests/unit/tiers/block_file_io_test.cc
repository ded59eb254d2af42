#include "daemon/tiers/block_file_io.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "daemon/tiers/block_path.h"
#include "tests/unit/tiers/tier_test_data.h"

namespace kvstrata {
namespace {

namespace fs = std::filesystem;

std::string FreshRoot(absl::string_view base, absl::string_view name) {
  const std::string root = absl::StrCat(base, "/kvstrata_tiers_", name, "_", ::getpid());
  fs::remove_all(root);
  return root;
}

absl::StatusOr<BlockWriteInfo> Write(const std::string& path, absl::string_view payload,
                                     absl::string_view key = kKey) {
  return WriteBlockFile(path, *MakeBlockHeader(kFp, key, payload, 1), payload);
}

size_t FilesUnder(const std::string& dir) {
  size_t n = 0;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) n += entry.is_regular_file();
  return n;
}

void ExpectRoundTrip(const std::string& root, size_t size) {
  const std::string path = *BlockFilePath(root, kFp, kKey);
  const std::string payload = Payload(size, static_cast<int>(size));
  absl::StatusOr<BlockWriteInfo> info = Write(path, payload);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(fs::file_size(path), BlockFileBytes(size));
  std::string read;
  BlockReadResult result = ReadBlockFile(path, kFp, kKey, &read);
  ASSERT_TRUE(result.hit()) << result.detail;
  EXPECT_EQ(*result.payload_bytes, size);
  EXPECT_TRUE(read == payload) << "payload differs, size " << size;
  EXPECT_EQ(FilesUnder(root), 1u) << "temp file left behind";
}

TEST(BlockFileIoTest, RoundTripsByteExact) {
  const std::string root = FreshRoot(::testing::TempDir(), "roundtrip");
  for (size_t size : {size_t{1}, size_t{4096}, size_t{(2 << 20) + 1}}) ExpectRoundTrip(root, size);
}

TEST(BlockFileIoTest, RoundTripsOnTmpfsWhereODirectMayBeRefused) {
  if (!fs::is_directory("/dev/shm")) GTEST_SKIP() << "no /dev/shm";
  const std::string root = FreshRoot("/dev/shm", "shm");
  for (size_t size : {size_t{1}, size_t{4096}, size_t{(2 << 20) + 1}}) ExpectRoundTrip(root, size);
  fs::remove_all(root);
}

TEST(BlockFileIoTest, BufferedWritesWorkWhenDirectIoIsOff) {
  const std::string root = FreshRoot(::testing::TempDir(), "buffered");
  const std::string path = *BlockFilePath(root, kFp, kKey);
  BlockWriteOptions options;
  options.try_direct_io = false;
  options.fsync = FsyncPolicy::kNone;
  const std::string payload = Payload(10000, 3);
  absl::StatusOr<BlockWriteInfo> info =
      WriteBlockFile(path, *MakeBlockHeader(kFp, kKey, payload, 1), payload, options);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_FALSE(info->direct_io);
  std::string read;
  EXPECT_TRUE(ReadBlockFile(path, kFp, kKey, &read).hit());
}

// A misaligned buffer makes an O_DIRECT write fail with EINVAL: the fallback must clear
// O_DIRECT and finish the write buffered.
TEST(BlockFileIoTest, FallsBackToBufferedWhenAnODirectWriteIsRefused) {
  const std::string root = FreshRoot(::testing::TempDir(), "fallback");
  ASSERT_TRUE(MakeDirectories(root).ok());
  const std::string path = root + "/f";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_DIRECT, 0644);
  if (fd < 0) GTEST_SKIP() << "filesystem refuses O_DIRECT at open: " << std::strerror(errno);
  const std::string data = "x" + Payload(4096, 1);
  bool direct = true;
  absl::Status status = internal::WriteFullyAt(fd, data.data() + 1, 4096, 0, &direct);
  ::close(fd);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_FALSE(direct);
  EXPECT_EQ(fs::file_size(path), 4096u);
}

TEST(BlockFileIoTest, AMissingFileIsAbsentAndNotQuarantined) {
  std::string read;
  BlockReadResult result = ReadBlockFile(::testing::TempDir() + "/nope.kv", kFp, kKey, &read);
  EXPECT_FALSE(result.hit());
  EXPECT_EQ(result.miss, BlockMiss::kAbsent);
  EXPECT_FALSE(ShouldQuarantine(BlockMiss::kAbsent));
  EXPECT_FALSE(ShouldQuarantine(BlockMiss::kIoError));
}

// Issue 17: over GlusterFS open(2) can succeed from a cache and fstat(2) then fail with
// ENOENT or ESTALE when another mount deleted the file: a miss ("gone"), not an I/O error.
TEST(BlockFileIoTest, AFileGoneAtAnyCallIsAbsentOtherErrorsAreIoErrors) {
  EXPECT_EQ(internal::MissOfErrno(ENOENT), BlockMiss::kAbsent);
  EXPECT_EQ(internal::MissOfErrno(ESTALE), BlockMiss::kAbsent);
  EXPECT_EQ(internal::MissOfErrno(EIO), BlockMiss::kIoError);
  EXPECT_EQ(internal::MissOfErrno(EACCES), BlockMiss::kIoError);
}

TEST(BlockFileIoTest, AnUnreadableFileIsAnIoErrorThatSaysWhy) {
  if (::geteuid() == 0) GTEST_SKIP() << "root reads any file";
  const std::string path = ::testing::TempDir() + "/unreadable.kv";
  ASSERT_TRUE(WriteBlockFile(path, *MakeBlockHeader(kFp, kKey, "payload", 1), "payload").ok());
  ASSERT_EQ(::chmod(path.c_str(), 0), 0);
  std::string read;
  BlockReadResult result = ReadBlockFile(path, kFp, kKey, &read);
  EXPECT_EQ(result.miss, BlockMiss::kIoError);
  EXPECT_EQ(result.detail, "open: Permission denied");
  fs::remove(path);
}

// Issue 46 item 8: two daemons creating the same hash directory through two GlusterFS
// mounts. Our mkdir answers EEXIST (the other node made it) and our stat of it answers
// ESTALE / ENOENT for a while; or our open in it answers ESTALE (the other mount replaced
// it). RacingCalls injects both, counting down, and creates the directory for real.
struct Race {
  std::atomic<int> mkdir_errors{0};  // mkdirs of `target` that make it and answer EEXIST
  std::atomic<int> mkdir_error{EEXIST};
  std::atomic<int> stat_errors{0};  // stats of `target` that answer ESTALE
  std::atomic<int> open_errors{0};  // opens under `target` that answer ESTALE
  std::atomic<int> sleeps_ms{0};
  std::string target;
};
Race* race = nullptr;

int RacingMkdir(const char* path, mode_t mode) {
  if (race->target == path && race->mkdir_errors.fetch_sub(1) > 0) {
    if (race->mkdir_error == EEXIST) ::mkdir(path, mode);
    errno = race->mkdir_error;
    return -1;
  }
  return ::mkdir(path, mode);
}
int RacingStat(const char* path, struct stat* st) {
  if (race->target == path && race->stat_errors.fetch_sub(1) > 0) {
    errno = ESTALE;
    return -1;
  }
  return ::stat(path, st);
}
int RacingOpen(const char* path, int flags, mode_t mode) {
  if (absl::string_view(path).substr(0, race->target.size()) == race->target &&
      race->open_errors.fetch_sub(1) > 0) {
    errno = ESTALE;
    return -1;
  }
  return ::open(path, flags, mode);
}
void CountSleep(int ms) { race->sleeps_ms += ms; }

class DirectoryRaceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = FreshRoot(::testing::TempDir(), "dir_race");
    fs::create_directories(root_);
    race_.target = root_ + "/ab/cd";
    race = &race_;
    internal::SetDirectoryCallsForTest(&kCalls);
  }
  void TearDown() override {
    internal::SetDirectoryCallsForTest(nullptr);
    race = nullptr;
    fs::remove_all(root_);
  }
  static constexpr internal::DirectoryCalls kCalls = {RacingMkdir, RacingStat, RacingOpen,
                                                      CountSleep};
  std::string root_;
  Race race_;
};

TEST_F(DirectoryRaceTest, EexistIsSuccessOnceTheStatFindsADirectory) {
  race_.mkdir_errors = 1;
  race_.stat_errors = 3;  // ESTALE past the old 1+4+16+64 ms
  ASSERT_TRUE(MakeDirectories(race_.target).ok());
  EXPECT_TRUE(fs::is_directory(race_.target));
  EXPECT_EQ(race_.sleeps_ms, 1 + 4 + 16);
}

TEST_F(DirectoryRaceTest, AWriteSucceedsThroughADirectoryAnotherNodeIsCreating) {
  race_.mkdir_errors = 1;
  race_.stat_errors = 2;
  race_.open_errors = 2;  // The first open (no directory) and one after it was made.
  const std::string path = race_.target + "/block.kv";
  ASSERT_TRUE(Write(path, "payload").ok());
  std::string read;
  EXPECT_TRUE(ReadBlockFile(path, kFp, kKey, &read).hit());
  EXPECT_EQ(read, "payload");
}

TEST_F(DirectoryRaceTest, ARaceThatDoesNotSettleIsAbortedNeverAnIoError) {
  race_.mkdir_errors = 1000;
  race_.mkdir_error = ESTALE;
  absl::Status made = MakeDirectories(race_.target);
  EXPECT_TRUE(absl::IsAborted(made)) << made;
  EXPECT_EQ(race_.sleeps_ms, 1 + 4 + 16 + 64 + 256 + 1000);
  race_.mkdir_errors = 0;
  race_.open_errors = 1000;  // The directory is there; every open in it is stale.
  absl::StatusOr<BlockWriteInfo> written = Write(race_.target + "/block.kv", "payload");
  EXPECT_TRUE(absl::IsAborted(written.status())) << written.status();
  EXPECT_EQ(FilesUnder(root_), 0u);
  EXPECT_TRUE(absl::IsAborted(ErrnoToStatus(ESTALE, "rename")));
}

}  // namespace
}  // namespace kvstrata
