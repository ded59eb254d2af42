#include "daemon/pool/shm_region.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"

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

// memfd_create + ftruncate + mmap; closes the fd on failure.
absl::StatusOr<Mapping> MapMemfd(const std::string& name, uint64_t bytes, bool huge) {
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
  m.base = mmap(nullptr, m.size, PROT_READ | PROT_WRITE, MAP_SHARED, m.fd, 0);
  if (m.base == MAP_FAILED) {
    absl::Status st = ErrnoStatus("mmap");
    close(m.fd);
    return st;
  }
  return m;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShmRegion>> ShmRegion::Create(const ShmRegionOptions& options) {
  if (options.bytes == 0) return absl::InvalidArgumentError("shared region of 0 bytes");
  bool huge = options.huge_pages != HugePages::kOff;
  absl::StatusOr<Mapping> m = MapMemfd(options.name, options.bytes, huge);
  if (!m.ok() && options.huge_pages == HugePages::kAuto) {
    huge = false;
    m = MapMemfd(options.name, options.bytes, false);
  }
  if (!m.ok()) return m.status();
  uint64_t page = huge ? kHugePageBytes : static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  std::unique_ptr<ShmRegion> region(new ShmRegion(m->fd, m->base, m->size, huge, page));
  if (options.populate_threads >= 0) {
    int threads = options.populate_threads;
    if (threads == 0) threads = std::clamp<int>(std::thread::hardware_concurrency(), 1, 16);
    Populate(region->base_, region->size_, page, threads);
  }
  if (options.on_mapped) {
    absl::Status st = options.on_mapped(region->base_, region->size_);
    if (!st.ok()) return st;
  }
  return region;
}

ShmRegion::~ShmRegion() {
  munmap(base_, size_);
  close(fd_);
}

void ShmRegion::Populate(void* base, uint64_t bytes, uint64_t page_bytes, int threads) {
  uint64_t pages = (bytes + page_bytes - 1) / page_bytes;
  uint64_t per_thread = (pages + threads - 1) / threads;
  auto touch = [=](uint64_t first, uint64_t last) {
    auto* p = static_cast<volatile uint8_t*>(base);
    for (uint64_t i = first; i < last; ++i) p[i * page_bytes] = 0;
  };
  std::vector<std::thread> workers;
  for (int t = 1; t < threads; ++t) {
    uint64_t first = std::min(pages, t * per_thread);
    workers.emplace_back(touch, first, std::min(pages, first + per_thread));
  }
  touch(0, std::min(pages, per_thread));
  for (std::thread& w : workers) w.join();
}

}  // namespace kvstrata
