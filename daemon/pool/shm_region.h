// ShmRegion: the pinned shared-memory region of the L1 pool — one memfd (MFD_CLOEXEC),
// mapped MAP_SHARED read-write, populated up front by several threads (parallel first
// touch, so tens of GiB take seconds). Huge pages (MFD_HUGETLB) are used when asked for
// and available; with kAuto a failure falls back to normal pages.
//
// The fd can be passed to host-mode clients (SCM_RIGHTS); they map it themselves and
// address slots by offset (see docs/shared-memory.md).
// Thread safety: immutable after Create; all accessors may be called concurrently.
// Ownership: the region owns the fd and the mapping; both go away with the object.
#ifndef KVSTRATA_DAEMON_POOL_SHM_REGION_H_
#define KVSTRATA_DAEMON_POOL_SHM_REGION_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kvstrata {

enum class HugePages { kOff, kAuto, kOn };

struct ShmRegionOptions {
  std::string name = "kvstrata-l1";  // memfd name (shows in /proc/<pid>/fd)
  uint64_t bytes = 0;                // rounded up to the page size in use
  HugePages huge_pages = HugePages::kAuto;
  int populate_threads = 0;  // 0: hardware concurrency (capped at 16); <0: no populate
  // Called once after mapping and population, before Create returns (the hook for
  // cudaHostRegister). An error fails Create.
  std::function<absl::Status(void* base, size_t bytes)> on_mapped;
};

class ShmRegion {
 public:
  // INVALID_ARGUMENT for 0 bytes; INTERNAL / RESOURCE_EXHAUSTED with errno text when the
  // kernel refuses (including kOn without huge pages).
  static absl::StatusOr<std::unique_ptr<ShmRegion>> Create(const ShmRegionOptions& options);

  ShmRegion(const ShmRegion&) = delete;
  ShmRegion& operator=(const ShmRegion&) = delete;
  ~ShmRegion();

  int fd() const { return fd_; }
  void* base() const { return base_; }
  uint8_t* At(uint64_t offset) const { return static_cast<uint8_t*>(base_) + offset; }
  uint64_t size() const { return size_; }
  bool huge_pages() const { return huge_pages_; }
  uint64_t page_bytes() const { return page_bytes_; }

  // Writes one byte per page from `threads` threads; exposed for the benchmark.
  static void Populate(void* base, uint64_t bytes, uint64_t page_bytes, int threads);

 private:
  ShmRegion(int fd, void* base, uint64_t size, bool huge, uint64_t page)
      : fd_(fd), base_(base), size_(size), huge_pages_(huge), page_bytes_(page) {}

  int fd_;
  void* base_;
  uint64_t size_;
  bool huge_pages_;
  uint64_t page_bytes_;
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_POOL_SHM_REGION_H_
