// Stand-alone GPU check (no gRPC, no Abseil: nvcc alone builds it on the GPU machine) of
// the mapping that ShmRegion uses for tenant partitions (daemon/pool/shm_region.cc): one
// reserved range, several memfds mapped MAP_FIXED back to back. The transfer engine pins the
// whole range with one cudaHostRegister and copies by offset; this checks that the driver
// accepts such a range and that copies land in the right partition's pages.
//   nvcc -O2 -o /tmp/partitioned_region_check tests/gpu/partitioned_region_check.cu
//   /tmp/partitioned_region_check          # prints PASS or FAIL lines, exit 0 on PASS
#include <cuda_runtime.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#define CHECK(x)                                               \
  do {                                                         \
    cudaError_t e = (x);                                       \
    if (e != cudaSuccess) {                                    \
      std::printf("FAIL %s: %s\n", #x, cudaGetErrorString(e)); \
      return 1;                                                \
    }                                                          \
  } while (0)

int main() {
  const std::vector<size_t> sizes = {64 << 20, 32 << 20, 16 << 20};  // partitions 0, 1, 2
  size_t total = 0;
  for (size_t s : sizes) total += s;
  const size_t page = 2 << 20;
  void* range =
      mmap(nullptr, total + page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (range == MAP_FAILED) return std::printf("FAIL reserve\n"), 1;
  char* base =
      reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(range) + page - 1) / page * page);
  std::vector<int> fds;
  std::vector<size_t> offsets;
  size_t offset = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    int fd = memfd_create("kvstrata-l1-check", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, static_cast<off_t>(sizes[i])) != 0)
      return std::printf("FAIL memfd\n"), 1;
    if (mmap(base + offset, sizes[i], PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) ==
        MAP_FAILED) {
      return std::printf("FAIL map partition %zu\n", i), 1;
    }
    std::memset(base + offset, 0, sizes[i]);
    fds.push_back(fd);
    offsets.push_back(offset);
    offset += sizes[i];
  }
  CHECK(cudaHostRegister(base, total,
                         cudaHostRegisterPortable | cudaHostRegisterMapped));  // as the engine
  std::printf("PASS cudaHostRegister over %zu partitions (%zu MiB, one range)\n", sizes.size(),
              total >> 20);
  // Device -> host into the middle of partition 2, host -> device from partition 1.
  const size_t n = 8 << 20;
  char* dev = nullptr;
  CHECK(cudaMalloc(&dev, n));
  CHECK(cudaMemset(dev, 0x5a, n));
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  char* dst = base + offsets[2] + (4 << 20);
  CHECK(cudaMemcpyAsync(dst, dev, n, cudaMemcpyDeviceToHost, stream));
  CHECK(cudaStreamSynchronize(stream));
  unsigned char seen = 0;
  if (pread(fds[2], &seen, 1, (4 << 20) + n - 1) != 1 || seen != 0x5a) {
    return std::printf("FAIL the copy is not in partition 2's memfd (saw %u)\n", seen), 1;
  }
  if (pread(fds[1], &seen, 1, 4 << 20) != 1 || seen != 0) {
    return std::printf("FAIL partition 1 changed\n"), 1;
  }
  std::memset(base + offsets[1], 0x33, n);
  CHECK(cudaMemcpyAsync(dev, base + offsets[1], n, cudaMemcpyHostToDevice, stream));
  std::vector<char> back(n);
  CHECK(cudaMemcpyAsync(back.data(), dev, n, cudaMemcpyDeviceToHost, stream));
  CHECK(cudaStreamSynchronize(stream));
  for (size_t i = 0; i < n; i += 4096) {
    if (back[i] != 0x33) return std::printf("FAIL host->device from partition 1\n"), 1;
  }
  // Bandwidth of pinned copies across the partitioned range (the engine's path).
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  CHECK(cudaEventRecord(a, stream));
  for (int r = 0; r < 10; ++r) {
    CHECK(cudaMemcpyAsync(dev, base + offsets[0], n, cudaMemcpyHostToDevice, stream));
  }
  CHECK(cudaEventRecord(b, stream));
  CHECK(cudaEventSynchronize(b));
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, a, b));
  std::printf("PASS copies land in their partition's memfd; H2D from the range %.1f GB/s\n",
              10.0 * n / (ms * 1e6));
  CHECK(cudaHostUnregister(base));
  return 0;
}
