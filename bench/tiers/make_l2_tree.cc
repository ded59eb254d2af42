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

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "bench/tiers/tier_bench_util.h"
#include "daemon/tiers/block_file_format.h"
#include "daemon/tiers/block_path.h"
#include "daemon/tiers/namespace_file.h"

namespace kvstrata::bench {
namespace {

struct Flags {
  std::string root;
  uint64_t files = 1000000;
  uint64_t payload = 4096;
  std::string salt = "l2-restart";
  uint64_t stream = 42;
  int threads = 2;
  bool buffered = false;
};

bool Parse(int argc, char** argv, Flags* flags) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg(argv[i]);
    bool ok = false;
    if (absl::ConsumePrefix(&arg, "--root=")) {
      flags->root = std::string(arg);
      ok = !flags->root.empty();
    } else if (absl::ConsumePrefix(&arg, "--files=")) {
      ok = absl::SimpleAtoi(arg, &flags->files) && flags->files > 0;
    } else if (absl::ConsumePrefix(&arg, "--payload=")) {
      ok = absl::SimpleAtoi(arg, &flags->payload) && flags->payload > 0 &&
           flags->payload <= (1u << 30);
    } else if (absl::ConsumePrefix(&arg, "--salt=")) {
      flags->salt = std::string(arg);
      ok = true;
    } else if (absl::ConsumePrefix(&arg, "--stream=")) {
      ok = absl::SimpleAtoi(arg, &flags->stream);
    } else if (absl::ConsumePrefix(&arg, "--threads=")) {
      ok = absl::SimpleAtoi(arg, &flags->threads) && flags->threads > 0 && flags->threads <= 64;
    } else if (arg == "--buffered") {
      ok = flags->buffered = true;
    }
    if (!ok) {
      std::fprintf(stderr, "make_l2_tree: bad argument %s (see make_l2_tree.cc)\n", argv[i]);
      return false;
    }
  }
  if (flags->root.empty()) std::fprintf(stderr, "make_l2_tree: --root=DIR is required\n");
  return !flags->root.empty();
}

int Main(int argc, char** argv) {
  Flags flags;
  if (!Parse(argc, argv, &flags)) return 2;
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
  for (int t = 0; t < flags.threads; ++t) {
    threads.emplace_back([&] {
      AlignedBuffer payload = AllocateAligned(flags.payload);
      BlockWriteOptions options{FsyncPolicy::kNone, !flags.buffered};
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
