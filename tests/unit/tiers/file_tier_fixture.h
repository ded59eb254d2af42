// The FileTierTest fixture: a FileTier on a fresh directory under /tmp, with a tiny
// opaque namespace (8 KiB payloads) and a FaultFileSystem a test may put under it.
// MemoryFileTierTest: the same on a MemoryFileSystem (`memory_`), for tests of a local
// tier's logic that need no disk (a shared tier's journal files are real files).
#ifndef KVSTRATA_TESTS_UNIT_TIERS_FILE_TIER_FIXTURE_H_
#define KVSTRATA_TESTS_UNIT_TIERS_FILE_TIER_FIXTURE_H_

#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "daemon/testing/fault_file_system.h"
#include "daemon/testing/memory_file_system.h"
#include "daemon/tiers/block_path.h"
#include "daemon/tiers/file_tier.h"
#include "gtest/gtest.h"
#include "tests/unit/tiers/tier_test_data.h"

namespace kvstrata {

inline constexpr uint64_t kPayload = 8192;
inline constexpr uint64_t kFileBytes = 4096 + kPayload;

inline TierNamespace TestNamespace() {
  NamespaceSpec spec = OpaqueTestSpec(kPayload, "tiny");
  EXPECT_EQ(BytesPerBlock(spec), kPayload);
  return TierNamespace{Fingerprint(spec), spec, kPayload};
}

class FileTierTest : public ::testing::Test {
 protected:
  FileTierTest() = default;
  // `in_memory`: the tier's files live in `memory_`, not on disk.
  explicit FileTierTest(bool in_memory) : in_memory_(in_memory) {}
  void SetUp() override {
    char tmpl[] = "/tmp/kvs-filetier-XXXXXX";
    root_ = in_memory_ ? "/memory/tier" : mkdtemp(tmpl);
    ns_ = TestNamespace();
  }
  void TearDown() override {
    if (!in_memory_) std::filesystem::remove_all(root_);
  }

  FileTierOptions Options(bool shared = false) {
    FileTierOptions o = TestFileTierOptions(root_, shared);
    o.negative_cache_ttl = absl::Milliseconds(200);
    if (in_memory_) o.files = &memory_;
    return o;
  }
  // Options whose tier sees its first `n` block writes fail with EIO.
  FileTierOptions FailingFirstWrites(int n) {
    auto failures = std::make_shared<std::atomic<int>>(n);
    faults_.SetHook([failures](absl::string_view op, const std::string&) {
      return op == "write" && failures->fetch_sub(1) > 0 ? absl::UnavailableError("EIO")
                                                         : absl::OkStatus();
    });
    FileTierOptions o = Options();
    o.files = &faults_;
    return o;
  }
  std::unique_ptr<FileTier> Open(FileTierOptions o) {
    auto tier = FileTier::Open(std::move(o));
    EXPECT_TRUE(tier.ok()) << tier.status();
    if (!(*tier)->options().shared) {
      EXPECT_TRUE((*tier)->WaitWarm(absl::Seconds(10)));
    }
    return *std::move(tier);
  }
  std::string Key(int i) { return absl::StrCat("key-", i); }
  std::string PathOf(const std::string& key) { return *BlockFilePath(root_, ns_.fingerprint, key); }
  bool ReadBack(FileTier& tier, const std::string& key, const std::string& want) {
    std::string got(kPayload, '\0');
    return tier.Read(ns_, key, absl::MakeSpan(got)) && got == want;
  }

  const bool in_memory_ = false;
  std::string root_;
  TierNamespace ns_;
  MemoryFileSystem memory_;  // the tier's files when in_memory_; outlives the tier
  // Under a tier given it (FileTierOptions::files); outlives it. Over `memory_` when
  // in_memory_ (TearWrites then does not work: it truncates a real file).
  FaultFileSystem faults_{in_memory_ ? static_cast<BlockFileSystem*>(&memory_)
                                     : BlockFileSystem::Default()};
};

class MemoryFileTierTest : public FileTierTest {
 protected:
  MemoryFileTierTest() : FileTierTest(/*in_memory=*/true) {}
};

}  // namespace kvstrata

#endif  // KVSTRATA_TESTS_UNIT_TIERS_FILE_TIER_FIXTURE_H_
