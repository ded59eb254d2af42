#include "daemon/pool/shm_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace kvstrata {
namespace {

TEST(ShmRegionTest, MapsAPopulatedSharedRegion) {
  int hook_calls = 0;
  absl::StatusOr<std::unique_ptr<ShmRegion>> r =
      ShmRegion::Create({.bytes = 8 << 20,
                         .huge_pages = HugePages::kAuto,
                         .populate_threads = 3,
                         .on_mapped = [&](void* base, size_t bytes) {
                           ++hook_calls;
                           EXPECT_NE(base, nullptr);
                           EXPECT_GE(bytes, size_t{8} << 20);
                           return absl::OkStatus();
                         }});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(hook_calls, 1);
  EXPECT_GE((*r)->size(), uint64_t{8} << 20);
  EXPECT_GE((*r)->fd(), 0);
  std::memset((*r)->At(4096), 0xab, 4096);
  // A second mapping of the fd (what a host-mode client does) sees the same bytes.
  void* other = mmap(nullptr, (*r)->size(), PROT_READ, MAP_SHARED, (*r)->fd(), 0);
  ASSERT_NE(other, MAP_FAILED);
  EXPECT_EQ(static_cast<uint8_t*>(other)[4096 + 17], 0xab);
  munmap(other, (*r)->size());
}

TEST(ShmRegionTest, PopulateReportsProgressOnTheCallingThread) {
  std::vector<uint64_t> reports;
  uint64_t total = 0;
  const std::thread::id creator = std::this_thread::get_id();
  absl::StatusOr<std::unique_ptr<ShmRegion>> r =
      ShmRegion::Create({.bytes = 128 << 20,
                         .huge_pages = HugePages::kOff,
                         .populate_threads = 2,
                         .on_progress =
                             [&](uint64_t done, uint64_t bytes) {
                               EXPECT_EQ(std::this_thread::get_id(), creator);
                               reports.push_back(done);
                               total = bytes;
                             },
                         .progress_interval = absl::Milliseconds(1)});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_FALSE(reports.empty()) << "128 MiB populated in under a millisecond?";
  EXPECT_EQ(total, (*r)->size());
  EXPECT_TRUE(std::is_sorted(reports.begin(), reports.end()));
  EXPECT_LE(reports.back(), total);
}

TEST(ShmRegionTest, FdIsCloseOnExec) {
  auto r = ShmRegion::Create({.bytes = 1 << 20, .huge_pages = HugePages::kOff});
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE((*r)->huge_pages());
  EXPECT_TRUE(fcntl((*r)->fd(), F_GETFD) & FD_CLOEXEC);
}

TEST(ShmRegionTest, HookErrorFailsCreate) {
  auto r = ShmRegion::Create(
      {.bytes = 1 << 20, .huge_pages = HugePages::kOff, .on_mapped = [](void*, size_t) {
         return absl::UnavailableError("no GPU");
       }});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
}

TEST(ShmRegionTest, PartitionsAreMemfdsOfTheirOwnBackToBack) {
  absl::StatusOr<std::unique_ptr<ShmRegion>> r =
      ShmRegion::Create({.partition_bytes = {4 << 20, 2 << 20, 1 << 20},
                         .huge_pages = HugePages::kOff,
                         .populate_threads = 1});
  ASSERT_TRUE(r.ok()) << r.status();
  const ShmRegion& region = **r;
  ASSERT_EQ(region.partition_count(), 3u);
  EXPECT_EQ(region.size(), uint64_t{7} << 20);
  EXPECT_EQ(region.partition_offset(0), 0u);
  EXPECT_EQ(region.partition_offset(1), uint64_t{4} << 20);
  EXPECT_EQ(region.partition_offset(2), uint64_t{6} << 20);
  EXPECT_EQ(region.partition_size(1), uint64_t{2} << 20);
  EXPECT_NE(region.partition_fd(0), region.partition_fd(1));
  EXPECT_EQ(region.fd(), region.partition_fd(0));
  // What the daemon writes at a partition's offset is what that partition's fd holds at 0,
  // and no other partition's fd (as big) sees it.
  std::memset(region.At(region.partition_offset(1) + 4096), 0x5a, 4096);
  uint8_t byte = 0;
  ASSERT_EQ(pread(region.partition_fd(1), &byte, 1, 4096), 1);
  EXPECT_EQ(byte, 0x5a);
  ASSERT_EQ(pread(region.partition_fd(0), &byte, 1, 4096), 1);
  EXPECT_EQ(byte, 0);
  struct stat st {};
  ASSERT_EQ(fstat(region.partition_fd(2), &st), 0);
  EXPECT_EQ(st.st_size, 1 << 20);  // a client mapping partition 2 gets only its bytes
}

TEST(ShmRegionTest, RejectsZeroBytes) {
  EXPECT_EQ(ShmRegion::Create({.bytes = 0}).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvstrata
