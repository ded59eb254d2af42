// ShmRegion: the pinned shared-memory region of the L1 pool — one memfd (MFD_CLOEXEC),
// mapped MAP_SHARED read-write, populated up front by several threads (parallel first
// touch, so tens of GiB take seconds). Huge pages (MFD_HUGETLB) are used when asked for
// and available; with kAuto a failure falls back to normal pages.
//
// The fd can be passed to host-mode clients (SCM_RIGHTS); they map it themselves and
// address slots by offset (see docs/shared-memory.md). A region may be cut into partitions
// (one per tenant with its own L1 share, docs/security.md): each is a memfd of its own,
// mapped back to back so the daemon still sees one contiguous range, and a client is
// handed only the fd of its partition, so it cannot map another tenant's bytes.
// Thread safety: immutable after Create; all accessors may be called concurrently.
// Ownership: the region owns the fd and the mapping; both go away with the object.
#ifndef KVSTRATA_DAEMON_POOL_SHM_REGION_H_
#define KVSTRATA_DAEMON_POOL_SHM_REGION_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace kvstrata {

enum class HugePages { kOff, kAuto, kOn };

struct ShmRegionOptions {
  std::string name = "kvstrata-l1";  // memfd name (shows in /proc/<pid>/fd)
  uint64_t bytes = 0;                // rounded up to the page size in use
  // Sizes of the partitions, in order (each rounded up to the page size); empty = one
  // partition of `bytes` (then `bytes` is the size; else it is ignored).
  std::vector<uint64_t> partition_bytes;
  HugePages huge_pages = HugePages::kAuto;
  int populate_threads = 0;  // 0: hardware concurrency (capped at 16); <0: no populate
  // Called once after mapping and population, before Create returns (the hook for
  // cudaHostRegister). An error fails Create.
  std::function<absl::Status(void* base, size_t bytes)> on_mapped;
  // Called on the creating thread while the region is populated (a few seconds per GiB):
  // as each quarter (25%, 50%, 75%) is passed, and every `progress_interval` in between.
  // Not called at 100% (Create returns then) nor when there is no populate.
  std::function<void(uint64_t populated_bytes, uint64_t total_bytes)> on_progress;
  absl::Duration progress_interval = absl::Seconds(5);
};

class ShmRegion {
 public:
  // INVALID_ARGUMENT for 0 bytes; INTERNAL / RESOURCE_EXHAUSTED with errno text when the
  // kernel refuses (including kOn without huge pages).
  static absl::StatusOr<std::unique_ptr<ShmRegion>> Create(const ShmRegionOptions& options);

  ShmRegion(const ShmRegion&) = delete;
  ShmRegion& operator=(const ShmRegion&) = delete;
  ~ShmRegion();

  int fd() const { return parts_[0].fd; }  // the first partition's
  size_t partition_count() const { return parts_.size(); }
  int partition_fd(size_t i) const { return parts_[i].fd; }
  uint64_t partition_offset(size_t i) const { return parts_[i].offset; }
  uint64_t partition_size(size_t i) const { return parts_[i].size; }
  void* base() const { return base_; }
  uint8_t* At(uint64_t offset) const { return static_cast<uint8_t*>(base_) + offset; }
  uint64_t size() const { return size_; }
  bool huge_pages() const { return huge_pages_; }
  uint64_t page_bytes() const { return page_bytes_; }

  // Writes one byte per page from `threads` threads; exposed for the benchmark. With
  // `progress`, the calling thread only watches and reports (see on_progress).
  static void Populate(void* base, uint64_t bytes, uint64_t page_bytes, int threads,
                       const std::function<void(uint64_t, uint64_t)>& progress = {},
                       absl::Duration progress_interval = absl::Seconds(5));

 private:
  struct Partition {
    int fd = -1;
    uint64_t offset = 0;
    uint64_t size = 0;
  };
  ShmRegion(std::vector<Partition> parts, void* base, uint64_t size, bool huge, uint64_t page)
      : parts_(std::move(parts)), base_(base), size_(size), huge_pages_(huge), page_bytes_(page) {}

  std::vector<Partition> parts_;
  void* base_;
  uint64_t size_;
  bool huge_pages_;
  uint64_t page_bytes_;
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_POOL_SHM_REGION_H_
