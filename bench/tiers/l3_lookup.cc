// l3_lookup: Lookup latency on a shared L3 directory, two real kvstratad processes on one
// L3 root (l2 off, l3 on): daemon A stores blocks (host mode; write-through to L3), daemon
// B looks them up. Rows (1-key and 16-key Lookups over gRPC on B's Unix socket, each key
// looked up once per row):
//   hit, first time   - B has never seen the key: a file probe (stat) on the L3 tree;
//   hit, again        - the same keys: B's L3 index answers;
//   miss, cold        - keys no daemon wrote: a probe that finds nothing (and records it);
//   miss, warm        - the same keys again within l3.negative_cache_ms: no probe.
// Baseline in the same run: a third daemon with no lower tiers answering a 1-key Lookup
// that misses (the empty lookup: L1 only).
//
// Usage: l3_lookup [--dir=DIR (the L3 root's parent, default /var/tmp)] [--keys=1000]
//                  [--chains=64] [--block=4096]
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "bench/rpc/rpc_bench_util.h"
#include "bench/tiers/tier_bench_util.h"
#include "tests/integration/daemon_process.h"

namespace kvstrata::bench {
namespace {

constexpr size_t kChain = 16;
const char kSalt[] = "l3-lookup";

struct Flags {
  std::string dir = "/var/tmp";
  size_t keys = 1000;
  size_t chains = 64;
  uint64_t block = 4096;
};

struct Conn {
  std::unique_ptr<Stub> stub;
  uint64_t session = 0;
  uint32_t ns = 0;
  std::string fd_socket;
};

absl::StatusOr<Conn> Connect(const std::string& socket, uint64_t block) {
  Conn c{NewControlStub(socket)};
  absl::StatusOr<v1::OpenSessionResponse> session = OpenSession(*c.stub, "l3-lookup");
  if (!session.ok()) return session.status();
  c.session = session->session_id();
  c.fd_socket = session->shm_fd_socket();
  absl::StatusOr<uint32_t> ns = RegisterOpaqueNamespace(*c.stub, c.session, block, kSalt);
  if (!ns.ok()) return ns.status();
  c.ns = *ns;
  return c;
}

struct Row {
  std::string name;
  size_t keys_per_lookup = 1;
  Latency latency;
  size_t lookups = 0, full_hits = 0, wrong_tier = 0;
};

// Looks up each group once; `expect_hit`: every key should hit in L3.
absl::StatusOr<Row> Measure(Conn& c, const std::string& name,
                            const std::vector<std::vector<std::string>>& groups, bool expect_hit) {
  Row row{name, groups.empty() ? 1 : groups[0].size()};
  std::vector<double> micros;
  v1::LookupRequest request;
  request.set_session_id(c.session);
  request.set_namespace_id(c.ns);
  v1::LookupResponse response;
  for (const std::vector<std::string>& keys : groups) {
    request.clear_keys();
    for (const std::string& key : keys) request.add_keys(key);
    const double t0 = NowSeconds();
    if (absl::Status s = CallInto(*c.stub, &Stub::Lookup, request, &response); !s.ok()) return s;
    micros.push_back((NowSeconds() - t0) * 1e6);
    ++row.lookups;
    if (response.hit_blocks() == keys.size()) ++row.full_hits;
    for (const v1::BlockLocation& l : response.locations()) {
      if (expect_hit && l.tier() != v1::TIER_L3_SHARED) ++row.wrong_tier;
    }
  }
  row.latency = Summarize(micros);
  return row;
}

std::vector<std::vector<std::string>> Groups(uint64_t stream, size_t count, size_t size) {
  std::vector<std::vector<std::string>> groups(count);
  for (size_t g = 0; g < count; ++g) {
    for (size_t i = 0; i < size; ++i) groups[g].push_back(BenchKey(stream, g * size + i));
  }
  return groups;
}

std::vector<std::string> Flatten(const std::vector<std::vector<std::string>>& groups) {
  std::vector<std::string> all;
  for (const auto& g : groups) all.insert(all.end(), g.begin(), g.end());
  return all;
}

// Daemon A: stores every key (host mode) and waits until L3 has written them all.
absl::Status StoreOnA(testing::DaemonProcess& a, const std::vector<std::string>& keys,
                      uint64_t block) {
  absl::StatusOr<Conn> c = Connect(a.socket(), block);
  if (!c.ok()) return c.status();
  absl::StatusOr<MappedRegion> region = MapSessionRegion(c->fd_socket, c->session);
  if (!region.ok()) return region.status();
  constexpr size_t kBatch = 256;
  AlignedBuffer bytes = AllocateAligned(kBatch * block);
  for (size_t from = 0; from < keys.size(); from += kBatch) {
    std::vector<std::string> batch(keys.begin() + from,
                                   keys.begin() + std::min(keys.size(), from + kBatch));
    for (size_t i = 0; i < batch.size(); ++i) FillPayload(batch[i], bytes.get() + i * block, block);
    absl::StatusOr<size_t> stored =
        StoreBatch(*c->stub, c->session, c->ns, batch, *region, bytes.get(), block);
    if (!stored.ok()) return stored.status();
    if (*stored != batch.size()) return absl::InternalError("A did not store every block");
    // Let the write-through queue (l3.write_queue_blocks) drain before the next batch.
    for (int i = 0; i < 2000; ++i) {
      std::unique_ptr<Client> client = a.NewClient();
      absl::StatusOr<v1::ListTiersResponse> tiers =
          client->Call(&v1::Admin::Stub::ListTiers, client->admin(), v1::ListTiersRequest());
      if (!tiers.ok()) return tiers.status();
      bool done = false;
      for (const v1::TierInfo& t : tiers->tiers()) {
        if (t.name() != "l3") continue;
        if (t.dropped_writes() > 0) return absl::InternalError("A dropped L3 writes");
        done = t.written_blocks() >= from + batch.size() && t.queue_depth() == 0;
      }
      if (done) break;
      ::usleep(5000);
    }
  }
  return absl::OkStatus();
}

void Print(const Row& r) {
  std::printf("  %-34s %5zu %7zu %9zu %10.1f %10.1f%s\n", r.name.c_str(), r.keys_per_lookup,
              r.lookups, r.full_hits, r.latency.p50_us, r.latency.p99_us,
              r.wrong_tier > 0 ? "  (some not reported as L3)" : "");
}

bool Parse(int argc, char** argv, Flags* flags) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg(argv[i]);
    bool ok = false;
    if (absl::ConsumePrefix(&arg, "--dir=")) {
      flags->dir = std::string(arg);
      ok = !flags->dir.empty();
    } else if (absl::ConsumePrefix(&arg, "--keys=")) {
      ok = absl::SimpleAtoi(arg, &flags->keys) && flags->keys > 0;
    } else if (absl::ConsumePrefix(&arg, "--chains=")) {
      ok = absl::SimpleAtoi(arg, &flags->chains) && flags->chains > 0;
    } else if (absl::ConsumePrefix(&arg, "--block=")) {
      ok = absl::SimpleAtoi(arg, &flags->block) && flags->block > 0 && flags->block <= (64u << 20);
    }
    if (!ok) {
      std::fprintf(stderr, "l3_lookup: bad argument %s (see l3_lookup.cc)\n", argv[i]);
      return false;
    }
  }
  return true;
}

int Main(int argc, char** argv) {
  Flags flags;
  if (!Parse(argc, argv, &flags)) return 2;
  std::string pattern = flags.dir + "/kvstrata-l3-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  const std::string l3 = pattern;
  const std::string l3_flags = absl::StrCat(
      "--set=l1.capacity=256MiB,l1.slab_size=4MiB,l2.enabled=false,l3.enabled=true,l3.path=", l3,
      ",l3.capacity=16GiB,log.level=warn");
  testing::DaemonProcess a({l3_flags}), b({l3_flags});
  testing::DaemonProcess base(
      {"--set=l1.capacity=256MiB,l1.slab_size=4MiB,l2.enabled=false,"
       "l3.enabled=false,log.level=warn"});
  for (testing::DaemonProcess* d : {&a, &b, &base}) {
    if (absl::Status s = d->Start(); !s.ok()) {
      std::fprintf(stderr, "daemon: %s\n%s\n", s.ToString().c_str(), d->log().c_str());
      return 1;
    }
  }
  const auto singles = Groups(1, flags.keys, 1);
  const auto chains = Groups(2, flags.chains, kChain);
  const auto miss_singles = Groups(3, flags.keys, 1);
  const auto miss_chains = Groups(4, flags.chains, kChain);
  std::vector<std::string> stored = Flatten(singles);
  for (const std::string& k : Flatten(chains)) stored.push_back(k);
  const double t0 = NowSeconds();
  if (absl::Status s = StoreOnA(a, stored, flags.block); !s.ok()) {
    std::fprintf(stderr, "store on A: %s\n%s\n", s.ToString().c_str(), a.log().c_str());
    return 1;
  }
  std::printf(
      "l3_lookup: L3 root %s, daemon A stored %zu blocks of %lu bytes there in %.2f s; "
      "daemon %s\n\n",
      l3.c_str(), stored.size(), flags.block, NowSeconds() - t0,
      testing::DaemonProcess::BinaryPath().c_str());

  absl::StatusOr<Conn> cb = Connect(b.socket(), flags.block);
  absl::StatusOr<Conn> cbase = Connect(base.socket(), flags.block);
  if (!cb.ok() || !cbase.ok()) {
    std::fprintf(stderr, "connect failed\n");
    return 1;
  }
  // Warm the connections (first RPCs pay for channel set-up) with keys of another stream.
  (void)Measure(*cb, "", Groups(5, 50, 1), false);
  (void)Measure(*cbase, "", Groups(5, 50, 1), false);

  std::vector<absl::StatusOr<Row>> rows;
  rows.push_back(Measure(*cbase, "baseline: empty lookup, no tiers", miss_singles, false));
  rows.push_back(Measure(*cb, "L3 hit, first time (probe)", singles, true));
  rows.push_back(Measure(*cb, "L3 hit, again (index)", singles, true));
  rows.push_back(Measure(*cb, "L3 miss, cold (probe)", miss_singles, false));
  rows.push_back(Measure(*cb, "L3 miss, warm (negative cache)", miss_singles, false));
  rows.push_back(Measure(*cbase, "baseline: empty lookup, no tiers", miss_chains, false));
  rows.push_back(Measure(*cb, "L3 hit, first time (probe)", chains, true));
  rows.push_back(Measure(*cb, "L3 hit, again (index)", chains, true));
  rows.push_back(Measure(*cb, "L3 miss, cold (probe)", miss_chains, false));
  rows.push_back(Measure(*cb, "L3 miss, warm (negative cache)", miss_chains, false));
  // The baseline again, bracketing the L3 rows (the machine may be noisy).
  rows.push_back(
      Measure(*cbase, "baseline: empty lookup (again)", Groups(6, flags.keys, 1), false));

  std::printf("  %-34s %5s %7s %9s %10s %10s\n", "Lookup on daemon B", "keys", "lookups", "all hit",
              "p50 (us)", "p99 (us)");
  std::string json = "{\"bench\": \"l3_lookup\", \"rows\": [";
  for (size_t i = 0; i < rows.size(); ++i) {
    if (!rows[i].ok()) {
      std::fprintf(stderr, "lookup: %s\n", rows[i].status().ToString().c_str());
      return 1;
    }
    Print(*rows[i]);
    absl::StrAppend(
        &json, i ? ", " : "", "{\"row\": \"", rows[i]->name,
        "\", \"keys\": ", rows[i]->keys_per_lookup, ", \"p50_us\": ", rows[i]->latency.p50_us,
        ", \"p99_us\": ", rows[i]->latency.p99_us, ", \"all_hit\": ", rows[i]->full_hits,
        ", \"lookups\": ", rows[i]->lookups, "}");
  }
  std::printf("\n%s]}\n", json.c_str());
  a.Stop();
  b.Stop();
  base.Stop();
  testing::RunCommand("rm -rf " + l3);
  return 0;
}

}  // namespace
}  // namespace kvstrata::bench

int main(int argc, char** argv) { return kvstrata::bench::Main(argc, argv); }
