// make_l2_tree: fills an L2 directory with N valid block files of the bench namespace
// (tier_bench_util.h BenchNamespace), written through the daemon's own WriteBlockFile
// (real header, XXH3 checksum, temp file + rename), plus its namespace.json: the tree a
// daemon finds after a restart. Key i is BenchKey(stream, i); its payload is
// FillPayload(key), so a reader can check the bytes. Existing files are overwritten.
//
// Usage: make_l2_tree --root=DIR [--files=1000000] [--payload=4096] [--salt=l2-restart]
//                     [--stream=42] [--threads=2] [--buffered]
// Disk use: files * (4096 + payload rounded up to 4 KiB), plus the 65,536 prefix
// directories (e.g. 1M files of 4 KiB: 7.6 GiB + ~0.3 GiB).
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "bench/tiers/tier_bench_util.h"
#include "bench/tiers/tree_flags.h"
#include "daemon/tiers/block_file_format.h"
#include "daemon/tiers/block_path.h"
#include "daemon/tiers/namespace_file.h"

ABSL_FLAG(int, threads, 2, "Writer threads");
ABSL_FLAG(bool, buffered, false, "Write without O_DIRECT");

namespace kvstrata::bench {
namespace {

int Main(int argc, char** argv) {
  std::optional<TreeFlags> tree = ParseTreeFlags(argc, argv, "make_l2_tree");
  if (!tree.has_value()) return 2;
  const TreeFlags& flags = *tree;
  const int writers = absl::GetFlag(FLAGS_threads);
  if (writers < 1 || writers > 64) {
    std::fprintf(stderr, "make_l2_tree: --threads must be in 1..64\n");
    return 2;
  }
  absl::StatusOr<TierNamespace> ns = BenchNamespace(flags.payload, flags.salt);
  if (!ns.ok()) {
    std::fprintf(stderr, "namespace: %s\n", ns.status().ToString().c_str());
    return 2;
  }
  absl::StatusOr<std::string> fp = WriteNamespaceFile(flags.root, ns->spec);
  if (!fp.ok() || *fp != ns->fingerprint) {
    std::fprintf(stderr, "namespace.json: %s\n", fp.status().ToString().c_str());
    return 1;
  }
  const double t0 = MonotonicSeconds();
  std::atomic<uint64_t> next{0}, failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < writers; ++t) {
    threads.emplace_back([&] {
      AlignedBuffer payload = AllocateAligned(flags.payload);
      BlockWriteOptions options{FsyncPolicy::kNone, !absl::GetFlag(FLAGS_buffered)};
      for (uint64_t i = next++; i < flags.files; i = next++) {
        const std::string key = BenchKey(flags.stream, i);
        FillPayload(key, payload.get(), flags.payload);
        const absl::string_view bytes(payload.get(), flags.payload);
        absl::StatusOr<BlockHeader> header = MakeBlockHeader(ns->fingerprint, key, bytes, 0);
        absl::StatusOr<std::string> path = BlockFilePath(flags.root, ns->fingerprint, key);
        if (!header.ok() || !path.ok() || !WriteBlockFile(*path, *header, bytes, options).ok()) {
          if (failed++ < 5) std::fprintf(stderr, "make_l2_tree: write of file %lu failed\n", i);
          continue;
        }
        if ((i + 1) % 100000 == 0) {
          std::printf("  %lu files, %.1f s\n", i + 1, MonotonicSeconds() - t0);
          std::fflush(stdout);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const double seconds = MonotonicSeconds() - t0;
  std::printf(
      "make_l2_tree: %lu files of %lu payload bytes (%.2f GiB on disk) under %s/%s in "
      "%.1f s (%.0f files/s), %lu failed\n",
      flags.files, flags.payload,
      flags.files * static_cast<double>(BlockFileBytes(flags.payload)) / (1 << 30),
      flags.root.c_str(), ns->fingerprint.c_str(), seconds, flags.files / seconds, failed.load());
  return failed == 0 ? 0 : 1;
}

}  // namespace
}  // namespace kvstrata::bench

int main(int argc, char** argv) { return kvstrata::bench::Main(argc, argv); }
