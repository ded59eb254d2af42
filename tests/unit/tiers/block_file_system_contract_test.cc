// The BlockFileSystem contract (daemon/tiers/block_file_system.h), one typed suite that every
// implementation passes: the POSIX one on a real directory and the in-memory one
// (daemon/testing/memory_file_system.h). Only the interface is used: a foreign file is made
// with UpdateLockedFile, an empty one with TryLock. A new implementation adds its factory
// to the list below the factories.
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/testing/memory_file_system.h"
#include "daemon/tiers/block_file_system.h"
#include "daemon/tiers/block_path.h"
#include "gtest/gtest.h"
#include "tests/unit/tiers/tier_test_data.h"

namespace kvstrata {
namespace {

constexpr uint64_t kPayload = 8192;
constexpr char kOtherFp[] = "fedcba9876543210fedcba9876543210";

// Each factory owns a filesystem and an empty directory `root()` on it.
class PosixFactory {
 public:
  PosixFactory() {
    char tmpl[] = "/tmp/kvs-fs-contract-XXXXXX";
    root_ = mkdtemp(tmpl);
  }
  ~PosixFactory() { std::filesystem::remove_all(root_); }
  BlockFileSystem& fs() { return *BlockFileSystem::Default(); }
  const std::string& root() const { return root_; }

 private:
  std::string root_;
};

class MemoryFactory {
 public:
  MemoryFactory() { EXPECT_TRUE(fs_.MakeDirectories(root_).ok()); }
  BlockFileSystem& fs() { return fs_; }
  const std::string& root() const { return root_; }

 private:
  MemoryFileSystem fs_;
  std::string root_ = "/kvs-memory/contract";
};

template <typename Factory>
class BlockFileSystemContractTest : public ::testing::Test {
 protected:
  BlockFileSystem& fs() { return factory_.fs(); }
  std::string Root() const { return factory_.root(); }
  std::string PathOf(const std::string& key, const char* fp = kFp) {
    return *BlockFilePath(Root(), fp, key);
  }
  absl::Status Write(const std::string& path, const std::string& key, absl::string_view payload,
                     const char* fp = kFp, BlockWriteOptions options = {FsyncPolicy::kNone}) {
    absl::StatusOr<BlockHeader> header = MakeBlockHeader(fp, key, payload, 1);
    if (!header.ok()) return header.status();
    return fs().WriteBlock(path, *header, payload, options).status();
  }
  BlockReadResult Read(const std::string& path, const std::string& key, std::string* out,
                       const char* fp = kFp) {
    return fs().ReadBlock(path, fp, key, absl::MakeSpan(*out));
  }
  std::set<std::pair<std::string, bool>> List(const std::string& dir) {
    std::set<std::pair<std::string, bool>> entries;
    const bool listed = fs().ListDirectory(
        dir, [&](absl::string_view name, bool is_dir) { entries.emplace(name, is_dir); });
    EXPECT_TRUE(listed) << dir;
    return entries;
  }

  Factory factory_;
};

using Factories = ::testing::Types<PosixFactory, MemoryFactory>;
TYPED_TEST_SUITE(BlockFileSystemContractTest, Factories);

TYPED_TEST(BlockFileSystemContractTest, AWrittenBlockReadsBackByteExact) {
  const std::string path = this->PathOf(kKey), data = Payload(kPayload, 1);
  ASSERT_TRUE(this->Write(path, kKey, data, kFp, BlockWriteOptions{}).ok());
  std::string got(kPayload, '\0');
  BlockReadResult read = this->Read(path, kKey, &got);
  ASSERT_TRUE(read.hit()) << read.detail;
  EXPECT_EQ(*read.payload_bytes, kPayload);
  EXPECT_EQ(got, data);
  std::optional<FileInfo> info = this->fs().Stat(path);
  ASSERT_TRUE(info.has_value());
  EXPECT_TRUE(info->regular);
  EXPECT_EQ(info->size, BlockFileBytes(kPayload));
}

TYPED_TEST(BlockFileSystemContractTest, TheLastWriteOfAPathWins) {
  const std::string path = this->PathOf(kKey);
  ASSERT_TRUE(this->Write(path, kKey, Payload(kPayload, 1)).ok());
  ASSERT_TRUE(this->Write(path, kKey, Payload(kPayload, 2)).ok());
  std::string got(kPayload, '\0');
  ASSERT_TRUE(this->Read(path, kKey, &got).hit());
  EXPECT_EQ(got, Payload(kPayload, 2));
}

TYPED_TEST(BlockFileSystemContractTest, AWriteCreatesItsDirectoriesAndListsThem) {
  const std::string path = this->PathOf(kKey);
  ASSERT_TRUE(this->Write(path, kKey, Payload(kPayload, 3)).ok());
  const std::string dir = path.substr(0, path.rfind('/'));
  const std::string name = path.substr(dir.size() + 1);
  EXPECT_EQ(this->List(dir), (std::set<std::pair<std::string, bool>>{{name, false}}));
  EXPECT_EQ(this->List(this->Root()), (std::set<std::pair<std::string, bool>>{{kFp, true}}));
  std::optional<FileInfo> info = this->fs().Stat(dir);
  ASSERT_TRUE(info.has_value());
  EXPECT_FALSE(info->regular);
}

TYPED_TEST(BlockFileSystemContractTest, ReadMissesSayWhy) {
  const std::string path = this->PathOf(kKey);
  std::string got(kPayload, '\0');
  EXPECT_EQ(this->Read(path, kKey, &got).miss, BlockMiss::kAbsent);
  ASSERT_TRUE(this->Write(path, kKey, Payload(kPayload, 4)).ok());
  BlockReadResult other_ns = this->Read(path, kKey, &got, kOtherFp);
  EXPECT_FALSE(other_ns.hit());
  EXPECT_EQ(other_ns.miss, BlockMiss::kWrongNamespace);
  EXPECT_EQ(this->Read(path, "another-key", &got).miss, BlockMiss::kWrongKey);
  std::string small(kPayload / 2, '\0');
  EXPECT_EQ(this->Read(path, kKey, &small).miss, BlockMiss::kBadHeader);
  const std::string dir = path.substr(0, path.rfind('/'));
  EXPECT_EQ(this->Read(dir, kKey, &got).miss, BlockMiss::kBadHeader);  // not a regular file
}

TYPED_TEST(BlockFileSystemContractTest, AForeignOrEmptyFileIsABadBlock) {
  const std::string foreign = this->Root() + "/foreign.kv";
  ASSERT_TRUE(
      this->fs().UpdateLockedFile(foreign, [](absl::string_view) { return "not a block"; }).ok());
  std::string got(kPayload, '\0');
  BlockReadResult read = this->Read(foreign, kKey, &got);
  EXPECT_EQ(read.miss, BlockMiss::kBadHeader);
  EXPECT_TRUE(ShouldQuarantine(read.miss));
  const std::string empty = this->Root() + "/empty.kv";
  ASSERT_NE(this->fs().TryLock(empty), nullptr);
  EXPECT_EQ(this->Read(empty, kKey, &got).miss, BlockMiss::kTruncated);
}

TYPED_TEST(BlockFileSystemContractTest, StatFindsNothingWhereNothingIs) {
  EXPECT_FALSE(this->fs().Stat(this->Root() + "/nothing").has_value());
  std::optional<FileInfo> root = this->fs().Stat(this->Root());
  ASSERT_TRUE(root.has_value());
  EXPECT_FALSE(root->regular);
}

TYPED_TEST(BlockFileSystemContractTest, ListingFailsOnlyForWhatIsNoDirectory) {
  EXPECT_TRUE(this->List(this->Root()).empty());
  auto ignore = [](absl::string_view, bool) {};
  EXPECT_FALSE(this->fs().ListDirectory(this->Root() + "/missing", ignore));
  const std::string path = this->PathOf(kKey);
  ASSERT_TRUE(this->Write(path, kKey, Payload(kPayload, 5)).ok());
  EXPECT_FALSE(this->fs().ListDirectory(path, ignore));
}

TYPED_TEST(BlockFileSystemContractTest, RemoveRemovesAFileOnce) {
  const std::string path = this->PathOf(kKey);
  ASSERT_TRUE(this->Write(path, kKey, Payload(kPayload, 6)).ok());
  EXPECT_TRUE(this->fs().Remove(path));
  EXPECT_FALSE(this->fs().Remove(path));
  EXPECT_FALSE(this->fs().Stat(path).has_value());
  std::string got(kPayload, '\0');
  EXPECT_EQ(this->Read(path, kKey, &got).miss, BlockMiss::kAbsent);
  EXPECT_FALSE(this->fs().Remove(this->Root()));  // Not a directory.
  EXPECT_TRUE(this->fs().Stat(this->Root()).has_value());
}

TYPED_TEST(BlockFileSystemContractTest, TouchMovesTheModificationTimeOfWhatIsThere) {
  const std::string path = this->PathOf(kKey);
  ASSERT_TRUE(this->Write(path, kKey, Payload(kPayload, 7)).ok());
  const absl::Time written = this->fs().Stat(path)->modified;
  EXPECT_LT(absl::AbsDuration(written - absl::Now()), absl::Seconds(5));
  absl::SleepFor(absl::Milliseconds(30));  // Past a coarse filesystem clock's tick.
  this->fs().Touch(path);
  EXPECT_GT(this->fs().Stat(path)->modified, written);
  const std::string absent = this->Root() + "/absent";
  this->fs().Touch(absent);
  EXPECT_FALSE(this->fs().Stat(absent).has_value());  // Touch creates nothing.
}

TYPED_TEST(BlockFileSystemContractTest, MakeDirectoriesIsMkdirDashP) {
  const std::string dir = this->Root() + "/a/b/c";
  ASSERT_TRUE(this->fs().MakeDirectories(dir).ok());
  ASSERT_TRUE(this->fs().MakeDirectories(dir).ok());  // Existing: fine.
  EXPECT_EQ(this->List(this->Root() + "/a"), (std::set<std::pair<std::string, bool>>{{"b", true}}));
  const std::string path = this->PathOf(kKey);
  ASSERT_TRUE(this->Write(path, kKey, Payload(kPayload, 8)).ok());
  EXPECT_FALSE(this->fs().MakeDirectories(path).ok());             // A file is there.
  EXPECT_FALSE(this->fs().MakeDirectories(path + "/below").ok());  // ... or in the way.
}

TYPED_TEST(BlockFileSystemContractTest, NamespaceFilesRoundTrip) {
  NamespaceSpec spec = OpaqueTestSpec(kPayload, "contract");
  absl::StatusOr<std::string> fingerprint = this->fs().WriteNamespace(this->Root(), spec);
  ASSERT_TRUE(fingerprint.ok()) << fingerprint.status();
  EXPECT_EQ(*fingerprint, Fingerprint(spec));
  absl::StatusOr<NamespaceSpec> read = this->fs().ReadNamespace(this->Root(), *fingerprint);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(Fingerprint(*read), *fingerprint);
  EXPECT_TRUE(this->List(this->Root() + "/" + *fingerprint)
                  .contains({std::string(kNamespaceFileName), false}));
  EXPECT_TRUE(absl::IsNotFound(this->fs().ReadNamespace(this->Root(), kOtherFp).status()));
}

TYPED_TEST(BlockFileSystemContractTest, ANamespaceFileThatDoesNotParseIsDataLoss) {
  const std::string path = *NamespaceFilePath(this->Root(), kFp);
  ASSERT_TRUE(this->fs().MakeDirectories(*NamespaceDir(this->Root(), kFp)).ok());
  ASSERT_TRUE(this->fs().UpdateLockedFile(path, [](absl::string_view) { return "{oops"; }).ok());
  EXPECT_TRUE(absl::IsDataLoss(this->fs().ReadNamespace(this->Root(), kFp).status()));
}

TYPED_TEST(BlockFileSystemContractTest, QuarantineMovesAFileAsideUnderTheRoot) {
  const std::string path = this->PathOf(kKey);
  ASSERT_TRUE(this->Write(path, kKey, Payload(kPayload, 9)).ok());
  absl::StatusOr<std::string> moved = this->fs().Quarantine(path, this->Root());
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_FALSE(this->fs().Stat(path).has_value());
  const std::string dir = absl::StrCat(this->Root(), "/", kQuarantineDirName, "/");
  EXPECT_EQ(moved->rfind(dir, 0), 0u) << *moved;
  std::optional<FileInfo> info = this->fs().Stat(*moved);
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->size, BlockFileBytes(kPayload));
  EXPECT_TRUE(absl::IsNotFound(this->fs().Quarantine(path, this->Root()).status()));
  EXPECT_TRUE(
      absl::IsInvalidArgument(this->fs().Quarantine("/elsewhere/x.kv", this->Root()).status()));
}

TYPED_TEST(BlockFileSystemContractTest, TryLockIsExclusiveUntilReleased) {
  const std::string path = this->Root() + "/.lock";
  std::unique_ptr<FileLock> held = this->fs().TryLock(path);
  ASSERT_NE(held, nullptr);
  EXPECT_TRUE(this->fs().Stat(path).has_value());  // Created.
  EXPECT_EQ(this->fs().TryLock(path), nullptr);
  held.reset();
  EXPECT_NE(this->fs().TryLock(path), nullptr);
  EXPECT_EQ(this->fs().TryLock(this->Root() + "/missing/.lock"), nullptr);
}

TYPED_TEST(BlockFileSystemContractTest, UpdateLockedFileReadsAndRewritesTheContents) {
  const std::string path = this->Root() + "/ledger";
  std::string seen = "unset";
  auto set = [&](std::string next) {
    return this->fs().UpdateLockedFile(path, [&](absl::string_view current) {
      seen = std::string(current);
      return std::optional<std::string>(next);
    });
  };
  ASSERT_TRUE(set("one").ok());
  EXPECT_EQ(seen, "");  // A new file: empty.
  ASSERT_TRUE(set("two").ok());
  EXPECT_EQ(seen, "one");  // Without the padding.
  EXPECT_EQ(this->fs().Stat(path)->size, 16u << 10);
  ASSERT_TRUE(
      this->fs().UpdateLockedFile(path, [](absl::string_view) { return std::nullopt; }).ok());
  EXPECT_TRUE(absl::IsOutOfRange(set(std::string((16 << 10) + 1, 'x'))));
  ASSERT_TRUE(set("three").ok());
  EXPECT_EQ(seen, "two");  // Neither the untouched nor the refused update changed it.
  EXPECT_FALSE(
      this->fs()
          .UpdateLockedFile(this->Root() + "/missing/ledger", [](absl::string_view) { return "x"; })
          .ok());
}

TYPED_TEST(BlockFileSystemContractTest, UpdateLockedFileWaitsForTheLockHolder) {
  const std::string path = this->Root() + "/ledger";
  std::unique_ptr<FileLock> held = this->fs().TryLock(path);
  ASSERT_NE(held, nullptr);
  std::atomic<bool> updated{false};
  std::thread updater([&] {
    EXPECT_TRUE(this->fs()
                    .UpdateLockedFile(path,
                                      [&](absl::string_view) {
                                        updated = true;
                                        return "done";
                                      })
                    .ok());
  });
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(updated.load());
  held.reset();
  updater.join();
  EXPECT_TRUE(updated.load());
}

TYPED_TEST(BlockFileSystemContractTest, ConcurrentUpdatesAreSerialized) {
  const std::string path = this->Root() + "/counter";
  constexpr int kThreads = 4, kEach = 25;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kEach; ++i) {
        ASSERT_TRUE(
            this->fs()
                .UpdateLockedFile(path,
                                  [](absl::string_view current) {
                                    return std::to_string(
                                        current.empty() ? 1 : std::stoi(std::string(current)) + 1);
                                  })
                .ok());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  std::string final_count;
  ASSERT_TRUE(this->fs()
                  .UpdateLockedFile(path,
                                    [&](absl::string_view current) {
                                      final_count = std::string(current);
                                      return std::nullopt;
                                    })
                  .ok());
  EXPECT_EQ(final_count, std::to_string(kThreads * kEach));
}

TYPED_TEST(BlockFileSystemContractTest, ConcurrentWritersOfOnePathNeverTearIt) {
  const std::string path = this->PathOf(kKey);
  constexpr int kWriters = 3, kWrites = 20;
  std::atomic<int> writing{kWriters};
  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      for (int i = 0; i < kWrites; ++i) {
        EXPECT_TRUE(this->Write(path, kKey, Payload(kPayload, w)).ok());
      }
      --writing;
    });
  }
  std::string got(kPayload, '\0');
  int hits = 0;
  while (writing.load() > 0 || hits == 0) {
    BlockReadResult read = this->Read(path, kKey, &got);
    if (!read.hit()) {
      ASSERT_EQ(read.miss, BlockMiss::kAbsent) << read.detail;
      continue;
    }
    ++hits;
    bool whole = false;
    for (int w = 0; w < kWriters; ++w) whole = whole || got == Payload(kPayload, w);
    ASSERT_TRUE(whole) << "a torn or mixed block";
  }
  for (std::thread& t : threads) t.join();
}

TYPED_TEST(BlockFileSystemContractTest, AppendsAddUpAndReadBackByRange) {
  const std::string path = this->Root() + "/journal.log";
  EXPECT_TRUE(absl::IsNotFound(this->fs().ReadFileRange(path, 0, 16).status()));
  ASSERT_TRUE(this->fs().AppendFile(path, "first line\n").ok());  // creates it
  ASSERT_TRUE(this->fs().AppendFile(path, "second\n").ok());
  EXPECT_EQ(*this->fs().ReadFileRange(path, 0, 1024), "first line\nsecond\n");
  EXPECT_EQ(*this->fs().ReadFileRange(path, 6, 4), "line");
  EXPECT_EQ(*this->fs().ReadFileRange(path, 11, 1024), "second\n");
  EXPECT_EQ(*this->fs().ReadFileRange(path, 18, 16), "");   // at the end
  EXPECT_EQ(*this->fs().ReadFileRange(path, 100, 16), "");  // past it
  EXPECT_FALSE(this->fs().AppendFile(this->Root() + "/no-such-dir/x.log", "x\n").ok());
}

TYPED_TEST(BlockFileSystemContractTest, ConcurrentAppendsNeverOverwriteEachOther) {
  const std::string path = this->Root() + "/journal.log";
  std::vector<std::thread> writers;
  for (int t = 0; t < 4; ++t) {
    writers.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        EXPECT_TRUE(
            this->fs().AppendFile(path, absl::StrCat("writer ", t, " line ", i, "\n")).ok());
      }
    });
  }
  for (std::thread& w : writers) w.join();
  const std::string all = *this->fs().ReadFileRange(path, 0, 1 << 20);
  EXPECT_EQ(std::count(all.begin(), all.end(), '\n'), 200);
  for (int t = 0; t < 4; ++t) {
    EXPECT_NE(all.find(absl::StrCat("writer ", t, " line 49\n")), std::string::npos);
  }
}

TYPED_TEST(BlockFileSystemContractTest, FreeBytesAreKnownWhereThePathIs) {
  std::optional<uint64_t> free_bytes = this->fs().FreeBytes(this->Root());
  ASSERT_TRUE(free_bytes.has_value());
  EXPECT_GT(*free_bytes, 0u);
  EXPECT_FALSE(this->fs().FreeBytes(this->Root() + "/missing").has_value());
}

}  // namespace
}  // namespace kvstrata
