// host_store_load: host-mode store and load throughput through a real kvstratad —
// store = ReserveStore, copy into the mapped L1 slots, CommitStore; load = AcquireLoad,
// copy out of the slots, ReleaseLoad; 256 blocks per RPC — for block sizes 64 KiB,
// 256 KiB, 1 MiB and 2 MiB (opaque namespaces), beside a plain single-thread memcpy of the
// same bytes between two warm host buffers, measured in the same run. Target: store and
// load each >= 70% of memcpy.
//
// The client works as a connector would (bench/rpc/host_pipeline.h): by default the RPCs
// run on one thread and the copies on a second one, overlapping (while batch N is copied,
// batch N-1 is committed / released and batch N+1 reserved / acquired), and each block is
// copied with kvstrata::StreamCopy (streaming stores, client/cpp/block_copy.h). A
// single-thread StreamCopy of the same bytes is printed as a second baseline, so the gain
// of the copy routine alone can be told apart. `sequential` and `memcpy` give the
// original client (one thread, std::memcpy).
//
// Per block size: `rounds` rounds of `MiB` MiB each, fresh keys every round (the L1 of
// 1 GiB fills and evicts from the fourth round of data on: a full cache's steady state);
// the median round is reported. The client's mapping is pre-faulted once (a connector
// keeps its mapping for its lifetime); the time that took is printed.
//
// Usage: host_store_load [MiB per round=256] [rounds=3] [blocks per RPC=256]
//                        [pipelined|sequential] [stream|memcpy]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/rpc/host_pipeline.h"
#include "bench/rpc/rpc_bench_util.h"
#include "tests/integration/daemon_process.h"

namespace kvstrata::bench {
namespace {

struct Context {
  TransferOptions options;
  Stub* stub;
  uint64_t session;
  const MappedRegion* region;
  std::vector<char>* src;  // the engine's "KV tensor" stored from
  std::vector<char>* dst;  // and loaded into
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Stores (or loads) every block of one round; returns seconds.
absl::StatusOr<double> Pass(const Context& c, uint32_t ns, uint64_t block_bytes,
                            const std::vector<std::string>& keys, bool store) {
  Transfer t{c.stub, c.session, ns, c.region, block_bytes};
  double t0 = NowSeconds();
  absl::StatusOr<size_t> done = store ? StoreAll(t, keys, c.src->data(), c.options)
                                      : LoadAll(t, keys, c.dst->data(), c.options);
  double seconds = NowSeconds() - t0;
  if (!done.ok()) return done.status();
  if (*done != keys.size()) {
    return absl::InternalError(
        absl::StrCat(store ? "stored " : "loaded ", *done, " of ", keys.size(), " blocks"));
  }
  return seconds;
}

double CopySeconds(const Context& c, uint64_t bytes, CopyKind kind) {
  double t0 = NowSeconds();
  CopyBytes(kind, c.dst->data(), c.src->data(), bytes);
  return NowSeconds() - t0;
}

// One block size: prints one row. Returns false on an error or a missed target.
absl::StatusOr<bool> RunSize(const Context& c, uint64_t block_bytes, uint64_t bytes, int rounds,
                             uint64_t* stream) {
  absl::StatusOr<uint32_t> ns = RegisterOpaqueNamespace(
      *c.stub, c.session, block_bytes, absl::StrCat("host-store-load-", block_bytes));
  if (!ns.ok()) return ns.status();
  size_t blocks = bytes / block_bytes;
  std::vector<double> base, streamed, store, load;
  for (int r = 0; r < rounds; ++r) {
    std::vector<std::string> keys = MakeKeys((*stream)++, blocks);
    base.push_back(CopySeconds(c, bytes, CopyKind::kMemcpy));
    streamed.push_back(CopySeconds(c, bytes, CopyKind::kStream));
    std::memset(c.dst->data(), 0, bytes);
    absl::StatusOr<double> s = Pass(c, *ns, block_bytes, keys, /*store=*/true);
    if (!s.ok()) return s.status();
    absl::StatusOr<double> l = Pass(c, *ns, block_bytes, keys, /*store=*/false);
    if (!l.ok()) return l.status();
    if (std::memcmp(c.src->data(), c.dst->data(), bytes) != 0) {
      return absl::DataLossError("loaded bytes differ from stored bytes");
    }
    store.push_back(*s);
    load.push_back(*l);
  }
  double gb = bytes / 1e9;
  double memcpy_gbs = gb / Median(base), stream_gbs = gb / Median(streamed),
         store_gbs = gb / Median(store), load_gbs = gb / Median(load);
  double store_ratio = store_gbs / memcpy_gbs, load_ratio = load_gbs / memcpy_gbs;
  std::printf("  %7llu KiB  %6zu  %9.2f  %9.2f  %9.2f %5.0f%% %-4s  %9.2f %5.0f%% %-4s\n",
              static_cast<unsigned long long>(block_bytes >> 10), blocks, memcpy_gbs, stream_gbs,
              store_gbs, 100 * store_ratio, store_ratio >= 0.7 ? "PASS" : "FAIL", load_gbs,
              100 * load_ratio, load_ratio >= 0.7 ? "PASS" : "FAIL");
  return store_ratio >= 0.7 && load_ratio >= 0.7;
}

int Fail(const std::string& what, const absl::Status& status) {
  std::fprintf(stderr, "%s: %s\n", what.c_str(), status.ToString().c_str());
  return 1;
}

int Main(uint64_t mib, int rounds, TransferOptions options) {
  testing::DaemonProcess daemon(
      {"--set=l1.capacity=1GiB,l1.slab_size=64MiB,"
       "l2.enabled=false,log.level=warn"});
  if (absl::Status s = daemon.Start(); !s.ok()) return Fail("daemon\n" + daemon.log(), s);
  std::unique_ptr<Stub> stub = NewControlStub(daemon.socket());
  absl::StatusOr<v1::OpenSessionResponse> session = OpenSession(*stub, "host-store-load");
  if (!session.ok()) return Fail("session", session.status());
  absl::StatusOr<MappedRegion> region =
      MapSessionRegion(session->shm_fd_socket(), session->session_id());
  if (!region.ok()) return Fail("map region", region.status());
  double prefault = PrefaultRegion(*region);
  uint64_t bytes = mib << 20;
  std::vector<char> src(bytes), dst(bytes);
  for (uint64_t i = 0; i < bytes; i += 8) std::memcpy(&src[i], &i, 8);
  std::memset(dst.data(), 1, bytes);
  Context c{options, stub.get(), session->session_id(), &*region, &src, &dst};
  std::printf(
      "kvstratad host mode: L1 1 GiB (region %.0f MiB, client pre-fault %.3f s), "
      "%llu MiB per round, %d rounds (median), %zu blocks per RPC, %s client, %s\n\n",
      region->size() / 1048576.0, prefault, static_cast<unsigned long long>(mib), rounds,
      options.batch, options.pipelined ? "pipelined" : "sequential",
      options.copy == CopyKind::kStream ? "StreamCopy" : "memcpy");
  std::printf("  %11s  %6s  %9s  %9s  %21s  %21s\n", "block", "blocks", "memcpy", "stream",
              "store GB/s (% memcpy)", "load GB/s (% memcpy)");
  std::printf("  %11s  %6s  %9s  %9s  %21s  %21s\n", "", "", "GB/s", "GB/s", "target >= 70%",
              "target >= 70%");
  bool all_pass = true;
  uint64_t stream = 1;
  for (uint64_t kib : {64, 256, 1024, 2048}) {
    absl::StatusOr<bool> pass = RunSize(c, kib << 10, bytes, rounds, &stream);
    if (!pass.ok()) return Fail(absl::StrCat(kib, " KiB"), pass.status());
    all_pass = all_pass && *pass;
  }
  daemon.Stop();
  return all_pass ? 0 : 2;
}

}  // namespace
}  // namespace kvstrata::bench

int main(int argc, char** argv) {
  uint64_t mib = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 256;
  int rounds = argc > 2 ? std::atoi(argv[2]) : 3;
  kvstrata::bench::TransferOptions options;
  options.batch = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 256;
  options.pipelined = !(argc > 4 && std::string(argv[4]) == "sequential");
  options.copy = argc > 5 && std::string(argv[5]) == "memcpy" ? kvstrata::bench::CopyKind::kMemcpy
                                                              : kvstrata::bench::CopyKind::kStream;
  return kvstrata::bench::Main(mib, rounds, options);
}
