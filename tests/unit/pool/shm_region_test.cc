#include "daemon/pool/shm_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

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

TEST(ShmRegionTest, RejectsZeroBytes) {
  EXPECT_EQ(ShmRegion::Create({.bytes = 0}).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvstrata
