#include "daemon/pool/shm_region.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"

namespace kvstrata {
namespace {

constexpr uint64_t kHugePageBytes = 2 << 20;

struct Mapping {
  int fd = -1;
  void* base = nullptr;
  uint64_t size = 0;
};

absl::Status ErrnoStatus(const char* what) {
  int err = errno;
  std::string msg = absl::StrCat(what, ": ", std::strerror(err));
  if (err == ENOMEM || err == ENOSPC) return absl::ResourceExhaustedError(msg);
  return absl::InternalError(msg);
}

// memfd_create + ftruncate + mmap (at `at` when given, MAP_FIXED); closes the fd on failure.
absl::StatusOr<Mapping> MapMemfd(const std::string& name, uint64_t bytes, bool huge,
                                 void* at = nullptr) {
  unsigned flags = MFD_CLOEXEC | (huge ? MFD_HUGETLB : 0u);
  uint64_t page = huge ? kHugePageBytes : static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  Mapping m;
  m.size = (bytes + page - 1) / page * page;
  m.fd = memfd_create(name.c_str(), flags);
  if (m.fd < 0) return ErrnoStatus("memfd_create");
  if (ftruncate(m.fd, static_cast<off_t>(m.size)) != 0) {
    absl::Status st = ErrnoStatus("ftruncate");
    close(m.fd);
    return st;
  }
  m.base = mmap(at, m.size, PROT_READ | PROT_WRITE, MAP_SHARED | (at != nullptr ? MAP_FIXED : 0),
                m.fd, 0);
  if (m.base == MAP_FAILED) {
    absl::Status st = ErrnoStatus("mmap");
    close(m.fd);
    return st;
  }
  return m;
}

uint64_t PageBytes(bool huge) {
  return huge ? kHugePageBytes : static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

// Every partition a memfd of its own, mapped back to back in one reserved range.
absl::StatusOr<std::vector<Mapping>> MapPartitions(const std::string& name,
                                                   const std::vector<uint64_t>& sizes, bool huge,
                                                   void** base, uint64_t* total) {
  uint64_t page = PageBytes(huge);
  *total = 0;
  for (uint64_t s : sizes) *total += (s + page - 1) / page * page;
  // Reserve the range (no memory behind it), then map each memfd over its part.
  void* range =
      mmap(nullptr, *total + page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (range == MAP_FAILED) return ErrnoStatus("mmap (reserve)");
  auto* aligned = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(range) + page - 1) / page *
                                          page);  // huge-page aligned
  std::vector<Mapping> parts;
  uint64_t offset = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    absl::StatusOr<Mapping> m =
        MapMemfd(absl::StrCat(name, "-", i), sizes[i], huge, aligned + offset);
    if (!m.ok()) {
      for (const Mapping& done : parts) close(done.fd);
      munmap(range, *total + page);
      return m.status();
    }
    offset += m->size;
    parts.push_back(*m);
  }
  // Give back the unused head and tail of the reservation.
  if (aligned > static_cast<char*>(range)) munmap(range, aligned - static_cast<char*>(range));
  char* end = static_cast<char*>(range) + *total + page;
  if (aligned + *total < end) munmap(aligned + *total, end - (aligned + *total));
  *base = aligned;
  return parts;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShmRegion>> ShmRegion::Create(const ShmRegionOptions& options) {
  std::vector<uint64_t> sizes = options.partition_bytes;
  if (sizes.empty()) sizes.push_back(options.bytes);
  for (uint64_t s : sizes) {
    if (s == 0) return absl::InvalidArgumentError("shared region (or partition) of 0 bytes");
  }
  bool huge = options.huge_pages != HugePages::kOff;
  void* base = nullptr;
  uint64_t total = 0;
  std::vector<Partition> parts;
  if (sizes.size() == 1) {
    absl::StatusOr<Mapping> m = MapMemfd(options.name, sizes[0], huge);
    if (!m.ok() && options.huge_pages == HugePages::kAuto) {
      huge = false;
      m = MapMemfd(options.name, sizes[0], false);
    }
    if (!m.ok()) return m.status();
    base = m->base;
    total = m->size;
    parts.push_back({m->fd, 0, m->size});
  } else {
    absl::StatusOr<std::vector<Mapping>> m =
        MapPartitions(options.name, sizes, huge, &base, &total);
    if (!m.ok() && options.huge_pages == HugePages::kAuto) {
      huge = false;
      m = MapPartitions(options.name, sizes, false, &base, &total);
    }
    if (!m.ok()) return m.status();
    for (const Mapping& p : *m) {
      parts.push_back({p.fd,
                       static_cast<uint64_t>(static_cast<char*>(p.base) - static_cast<char*>(base)),
                       p.size});
    }
  }
  uint64_t page = PageBytes(huge);
  std::unique_ptr<ShmRegion> region(new ShmRegion(std::move(parts), base, total, huge, page));
  if (options.populate_threads >= 0) {
    int threads = options.populate_threads;
    if (threads == 0) threads = std::clamp<int>(std::thread::hardware_concurrency(), 1, 16);
    Populate(region->base_, region->size_, page, threads, options.on_progress,
             options.progress_interval);
  }
  if (options.on_mapped) {
    absl::Status st = options.on_mapped(region->base_, region->size_);
    if (!st.ok()) return st;
  }
  return region;
}

ShmRegion::~ShmRegion() {
  munmap(base_, size_);
  for (const Partition& p : parts_) close(p.fd);
}

void ShmRegion::Populate(void* base, uint64_t bytes, uint64_t page_bytes, int threads,
                         const std::function<void(uint64_t, uint64_t)>& progress,
                         absl::Duration progress_interval) {
  uint64_t pages = (bytes + page_bytes - 1) / page_bytes;
  uint64_t per_thread = (pages + threads - 1) / threads;
  std::atomic<uint64_t> touched{0};  // pages
  std::atomic<int> running{threads};
  absl::Notification finished;
  auto touch = [&, base, page_bytes](uint64_t first, uint64_t last) {
    constexpr uint64_t kBatch = 4096;  // pages between counts
    auto* p = static_cast<volatile uint8_t*>(base);
    for (uint64_t i = first; i < last;) {
      uint64_t end = std::min(last, i + kBatch);
      for (uint64_t j = i; j < end; ++j) p[j * page_bytes] = 0;
      touched.fetch_add(end - i, std::memory_order_relaxed);
      i = end;
    }
    if (running.fetch_sub(1) == 1) finished.Notify();
  };
  std::vector<std::thread> workers;
  // Without `progress` the calling thread is one of the workers.
  for (int t = progress ? 0 : 1; t < threads; ++t) {
    uint64_t first = std::min(pages, t * per_thread);
    workers.emplace_back(touch, first, std::min(pages, first + per_thread));
  }
  if (!progress) {
    touch(0, std::min(pages, per_thread));
  } else {
    int quarter = 1;  // the next one to report
    absl::Time last_report = absl::Now();
    absl::Duration poll = std::min(absl::Milliseconds(50), progress_interval);
    while (!finished.WaitForNotificationWithTimeout(poll)) {
      uint64_t done = std::min(bytes, touched.load(std::memory_order_relaxed) * page_bytes);
      bool passed = false;
      while (quarter < 4 && done * 4 >= quarter * bytes) passed = true, ++quarter;
      if (passed || absl::Now() - last_report >= progress_interval) {
        progress(done, bytes);
        last_report = absl::Now();
      }
    }
  }
  for (std::thread& w : workers) w.join();
}

}  // namespace kvstrata
