// pool_populate: time to create and populate the shared region, per GiB, with 1 and N
// threads, beside a single-thread memset of the same size on anonymous memory.
// Usage: pool_populate [GiB=2] [threads=hardware concurrency] [huge=auto|on|off]
#include <sys/mman.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "daemon/pool/shm_region.h"

namespace kvstrata {
namespace {

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double MemsetBaseline(uint64_t bytes) {
  auto start = std::chrono::steady_clock::now();
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return -1;
  std::memset(p, 0, bytes);
  double s = Seconds(start);
  munmap(p, bytes);
  return s;
}

double Populate(uint64_t bytes, int threads, HugePages huge, bool* used_huge) {
  auto start = std::chrono::steady_clock::now();
  auto region =
      ShmRegion::Create({.bytes = bytes, .huge_pages = huge, .populate_threads = threads});
  double s = Seconds(start);
  if (!region.ok()) {
    std::fprintf(stderr, "%s\n", region.status().ToString().c_str());
    std::exit(1);
  }
  *used_huge = (*region)->huge_pages();
  return s;
}

}  // namespace
}  // namespace kvstrata

int main(int argc, char** argv) {
  using namespace kvstrata;
  double gib = argc > 1 ? std::atof(argv[1]) : 2.0;
  int threads =
      argc > 2 ? std::atoi(argv[2]) : static_cast<int>(std::thread::hardware_concurrency());
  std::string mode = argc > 3 ? argv[3] : "auto";
  HugePages huge = mode == "on"    ? HugePages::kOn
                   : mode == "off" ? HugePages::kOff
                                   : HugePages::kAuto;
  uint64_t bytes = static_cast<uint64_t>(gib * (1ull << 30));
  bool used_huge = false;
  double base = MemsetBaseline(bytes);
  double one = Populate(bytes, 1, huge, &used_huge);
  double many = Populate(bytes, threads, huge, &used_huge);
  std::printf("region %.2f GiB, huge pages %s\n", gib, used_huge ? "yes" : "no");
  std::printf("baseline memset, 1 thread : %6.3f s/GiB\n", base / gib);
  std::printf("populate, 1 thread        : %6.3f s/GiB  (%.2fx baseline)\n", one / gib, base / one);
  std::printf("populate, %2d threads      : %6.3f s/GiB  (%.2fx baseline)\n", threads, many / gib,
              base / many);
  return 0;
}
