// index_memory: bytes per BlockIndex entry at 1M and 10M entries of 32-byte keys, from
// the allocator's in-use bytes (mallinfo2) and from RSS, beside the raw key bytes
// measured the same way in the same run.
// Usage: index_memory [entries...]   (default: 1000000 10000000)
#include <malloc.h>
#include <unistd.h>
#include <xxhash.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "daemon/index/block_index.h"

namespace kvstrata {
namespace {

struct Usage {
  double heap = 0;  // malloc in-use bytes, incl. mmap'ed chunks
  double rss = 0;
};

Usage Measure() {
  struct mallinfo2 mi = mallinfo2();
  long pages = 0, resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return {static_cast<double>(mi.uordblks + mi.hblkhd),
          static_cast<double>(resident) * sysconf(_SC_PAGESIZE)};
}

BlockKey MakeKey(uint64_t i) {
  uint64_t words[4];
  for (uint64_t w = 0; w < 4; ++w) words[w] = XXH3_64bits_withSeed(&i, sizeof(i), w);
  return *BlockKey::Make(1, std::string_view(reinterpret_cast<char*>(words), 32));
}

void Run(size_t n) {
  Usage before = Measure();
  {
    // Baseline: the raw key bytes alone, in one array.
    std::vector<char> raw(n * 32);
    for (size_t i = 0; i < n; ++i) std::memcpy(&raw[i * 32], MakeKey(i).bytes().data(), 32);
    Usage with_raw = Measure();
    std::printf("%zu entries: raw keys      heap %7.1f MiB  rss %7.1f MiB  (%5.1f B/key)\n", n,
                (with_raw.heap - before.heap) / (1 << 20), (with_raw.rss - before.rss) / (1 << 20),
                (with_raw.heap - before.heap) / n);
  }
  before = Measure();
  auto index = std::make_unique<BlockIndex>(64);
  BlockEntry entry;
  entry.tiers = TierBit(Tier::kL1);
  for (size_t i = 0; i < n; ++i) {
    entry.offset = i * 4096;
    index->Insert(MakeKey(i), entry);
  }
  Usage after = Measure();
  double heap = (after.heap - before.heap) / n;
  double rss = (after.rss - before.rss) / n;
  std::printf("%zu entries: BlockIndex    heap %7.1f MiB  rss %7.1f MiB\n", n,
              (after.heap - before.heap) / (1 << 20), (after.rss - before.rss) / (1 << 20));
  std::printf(
      "%zu entries: bytes/entry   heap %5.1f (%.1f beyond the 32 raw key bytes)  "
      "rss %5.1f (%.1f beyond)\n",
      n, heap, heap - 32, rss, rss - 32);
}

}  // namespace
}  // namespace kvstrata

int main(int argc, char** argv) {
  std::vector<size_t> sizes;
  for (int i = 1; i < argc; ++i) sizes.push_back(std::strtoull(argv[i], nullptr, 10));
  if (sizes.empty()) sizes = {1000000, 10000000};
  for (size_t n : sizes) kvstrata::Run(n);
  return 0;
}
