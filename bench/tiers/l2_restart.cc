// l2_restart: a real kvstratad restarted on an L2 directory that already holds many block
// files (make the tree with make_l2_tree, same --files/--payload/--salt/--stream). Measures
//   - serving: from spawn until the daemon answers GetStatus (DaemonProcess polls every
//     20 ms);
//   - first hit: then OpenSession, RegisterNamespace and a Lookup of one known key, which
//     finds it through the lazy path (the index is still cold: a file probe) -- or misses
//     when the probe outlasts l2.probe_timeout_ms, so it is asked again every 1 ms until it
//     hits -- and a host load of it (promotion L2 -> L1) whose bytes are checked;
//   - lazy lookups while the warm-up scan runs, then index lookups once it is done
//     (1-key Lookups of distinct random known keys; p50/p99 and how many hit);
//   - index warm: until ListTiers says index_warm (polled every 50 ms), plus the daemon's
//     own "index warm: N block files ... in X" log line, and its RSS then.
// Baseline in the same run: the same daemon, same flags, on an empty L2 directory
// (serving, and a 1-key Lookup that misses).
//
// Usage: l2_restart --root=DIR [--files=1000000] [--payload=4096] [--salt=l2-restart]
//                   [--stream=42] [--probes=200] [--drop_caches]
// --drop_caches writes 3 to /proc/sys/vm/drop_caches before the restart (root only): a
// restart after a reboot, with no dentries or inodes cached.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "bench/rpc/rpc_bench_util.h"
#include "bench/tiers/tier_bench_util.h"
#include "bench/tiers/tree_flags.h"
#include "daemon/tiers/block_file_format.h"
#include "tests/integration/daemon_process.h"

ABSL_FLAG(int, probes, 200, "Lookups of random known keys after the restart");
ABSL_FLAG(bool, drop_caches, false, "Drop the page, dentry and inode caches first (needs root)");

namespace kvstrata::bench {
namespace {

std::vector<std::string> DaemonFlags(const std::string& l2_path, uint64_t capacity_gib) {
  return {absl::StrCat("--set=l1.capacity=64MiB,l1.slab_size=4MiB,l2.enabled=true,l2.path=",
                       l2_path, ",l2.capacity=", capacity_gib, "GiB,log.level=info")};
}

struct Connection {
  std::unique_ptr<Stub> stub;
  uint64_t session = 0;
  uint32_t ns = 0;
  std::string fd_socket;
};

absl::StatusOr<Connection> Connect(const std::string& socket, const TreeFlags& flags) {
  Connection c{NewControlStub(socket)};
  absl::StatusOr<v1::OpenSessionResponse> session = OpenSession(*c.stub, "l2-restart");
  if (!session.ok()) return session.status();
  c.session = session->session_id();
  c.fd_socket = session->shm_fd_socket();
  absl::StatusOr<uint32_t> ns =
      RegisterOpaqueNamespace(*c.stub, c.session, flags.payload, flags.salt);
  if (!ns.ok()) return ns.status();
  c.ns = *ns;
  return c;
}

// One 1-key Lookup; returns the hit blocks (and the tier of the hit in *tier).
absl::StatusOr<uint32_t> LookupOne(Connection& c, const std::string& key, v1::Tier* tier) {
  v1::LookupRequest request;
  request.set_session_id(c.session);
  request.set_namespace_id(c.ns);
  request.add_keys(key);
  absl::StatusOr<v1::LookupResponse> response = Call(*c.stub, &Stub::Lookup, request);
  if (!response.ok()) return response.status();
  if (tier != nullptr && response->locations_size() > 0) *tier = response->locations(0).tier();
  return response->hit_blocks();
}

absl::StatusOr<v1::TierInfo> L2Info(testing::DaemonProcess& daemon) {
  std::unique_ptr<Client> client = daemon.NewClient();
  absl::StatusOr<v1::ListTiersResponse> tiers =
      client->Call(&v1::Admin::Stub::ListTiers, client->admin(), v1::ListTiersRequest());
  if (!tiers.ok()) return tiers.status();
  for (const v1::TierInfo& t : tiers->tiers()) {
    if (t.name() == "l2") return t;
  }
  return absl::NotFoundError("no l2 tier");
}

std::string RssMiB(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      unsigned long kib = 0;
      if (std::sscanf(line.c_str(), "VmRSS: %lu", &kib) == 1)
        return absl::StrCat(kib / 1024, " MiB");
    }
  }
  return "?";
}

std::string WarmLogLine(const std::string& log) {
  const size_t at = log.find("index warm:");
  if (at == std::string::npos) return "(no index warm line)";
  const size_t end = log.find('\n', at);
  return log.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

struct Probe {
  Latency latency;
  int hits = 0, tries = 0;
};

// 1-key Lookups of `count` keys drawn at random from the tree.
Probe LookupRandom(Connection& c, const TreeFlags& flags, std::mt19937_64& rng, int count,
                   const std::function<bool()>& keep_going) {
  Probe probe;
  std::vector<double> micros;
  std::uniform_int_distribution<uint64_t> pick(0, flags.files - 1);
  for (int i = 0; i < count && keep_going(); ++i) {
    const std::string key = BenchKey(flags.stream, pick(rng));
    const double t0 = NowSeconds();
    absl::StatusOr<uint32_t> hits = LookupOne(c, key, nullptr);
    micros.push_back((NowSeconds() - t0) * 1e6);
    ++probe.tries;
    if (hits.ok() && *hits == 1) ++probe.hits;
  }
  probe.latency = Summarize(micros);
  return probe;
}

int Main(int argc, char** argv) {
  std::optional<TreeFlags> tree = ParseTreeFlags(argc, argv, "l2_restart");
  if (!tree.has_value()) return 2;
  const TreeFlags& flags = *tree;
  const int probes = absl::GetFlag(FLAGS_probes);
  const bool drop_caches = absl::GetFlag(FLAGS_drop_caches);
  if (probes < 1) {
    std::fprintf(stderr, "l2_restart: --probes must be > 0\n");
    return 2;
  }
  absl::StatusOr<TierNamespace> tn = BenchNamespace(flags.payload, flags.salt);
  if (!tn.ok()) return 2;
  const uint64_t tree_gib = flags.files * BlockFileBytes(flags.payload) / (uint64_t{1} << 30) + 1;
  const uint64_t capacity_gib = tree_gib * 2 + 1;  // well above the high watermark
  std::printf("l2_restart: %lu files of %lu bytes under %s/%s, l2.capacity=%luGiB, daemon %s\n",
              flags.files, flags.payload, flags.root.c_str(), tn->fingerprint.c_str(), capacity_gib,
              testing::DaemonProcess::BinaryPath().c_str());

  // Baseline: an empty L2 directory.
  char empty_pattern[] = "/tmp/kvstrata-l2empty-XXXXXX";
  const std::string empty = ::mkdtemp(empty_pattern);
  double base_serve = 0, base_lookup = 0;
  {
    testing::DaemonProcess daemon(DaemonFlags(empty, capacity_gib));
    const double t0 = NowSeconds();
    if (absl::Status s = daemon.Start(); !s.ok()) {
      std::fprintf(stderr, "baseline daemon: %s\n", s.ToString().c_str());
      return 1;
    }
    base_serve = NowSeconds() - t0;
    absl::StatusOr<Connection> c = Connect(daemon.socket(), flags);
    if (!c.ok()) {
      std::fprintf(stderr, "baseline connect: %s\n", c.status().ToString().c_str());
      return 1;
    }
    absl::StatusOr<uint32_t> hits = LookupOne(*c, BenchKey(flags.stream, 0), nullptr);
    base_lookup = NowSeconds() - t0;
    if (!hits.ok() || *hits != 0) std::fprintf(stderr, "baseline lookup did not miss\n");
    daemon.Stop();
  }
  testing::RunCommand("rm -rf " + empty);

  if (drop_caches) {
    ::sync();
    std::ofstream("/proc/sys/vm/drop_caches") << "3\n";
    std::printf("dropped the page, dentry and inode caches\n");
  }

  testing::DaemonProcess daemon(DaemonFlags(flags.root, capacity_gib));
  const double t0 = NowSeconds();
  if (absl::Status s = daemon.Start(); !s.ok()) {
    std::fprintf(stderr, "daemon: %s\n", s.ToString().c_str());
    return 1;
  }
  const double serve = NowSeconds() - t0;
  absl::StatusOr<Connection> c = Connect(daemon.socket(), flags);
  if (!c.ok()) {
    std::fprintf(stderr, "connect: %s\n", c.status().ToString().c_str());
    return 1;
  }
  const std::string first_key = BenchKey(flags.stream, flags.files - 1);
  v1::Tier first_tier = v1::TIER_UNSPECIFIED;
  absl::StatusOr<uint32_t> first = LookupOne(*c, first_key, &first_tier);
  const double first_answer = NowSeconds() - t0;
  const bool first_was_hit = first.ok() && *first == 1;
  // A probe that outlasts l2.probe_timeout_ms makes that lookup a miss while the probe
  // finishes in the background; ask again (every 1 ms) until the key hits.
  int attempts = 1;
  while (!(first.ok() && *first == 1) && NowSeconds() - t0 < 60) {
    ::usleep(1000);
    first = LookupOne(*c, first_key, &first_tier);
    ++attempts;
  }
  const double first_hit = NowSeconds() - t0;
  const bool warm_at_first_hit = L2Info(daemon).ok() && L2Info(daemon)->index_warm();

  // Load it back (host mode): the daemon promotes it from L2 into L1 first.
  absl::StatusOr<MappedRegion> region = MapSessionRegion(c->fd_socket, c->session);
  if (!region.ok()) {
    std::fprintf(stderr, "map: %s\n", region.status().ToString().c_str());
    return 1;
  }
  AlignedBuffer got = AllocateAligned(flags.payload), want = AllocateAligned(flags.payload);
  FillPayload(first_key, want.get(), flags.payload);
  absl::StatusOr<size_t> loaded =
      LoadBatch(*c->stub, c->session, c->ns, {first_key}, *region, got.get(), flags.payload);
  const double first_load = NowSeconds() - t0;
  const bool bytes_ok =
      loaded.ok() && *loaded == 1 && std::memcmp(got.get(), want.get(), flags.payload) == 0;

  std::mt19937_64 rng(7);
  auto not_warm = [&] {
    absl::StatusOr<v1::TierInfo> info = L2Info(daemon);
    return info.ok() && !info->index_warm();
  };
  Probe lazy = LookupRandom(*c, flags, rng, probes, not_warm);

  double warm = -1;
  uint64_t warm_blocks = 0;
  while (NowSeconds() - t0 < 600) {
    absl::StatusOr<v1::TierInfo> info = L2Info(daemon);
    if (info.ok() && info->index_warm()) {
      warm = NowSeconds() - t0;
      warm_blocks = info->blocks();
      break;
    }
    ::usleep(50000);
  }
  const std::string rss = RssMiB(daemon.pid());
  Probe indexed = LookupRandom(*c, flags, rng, probes, [] { return true; });
  const std::string log = daemon.log();
  daemon.Stop();

  std::printf("\n%-46s %12s %12s\n", "", "empty L2", absl::StrCat(flags.files, " files").c_str());
  std::printf("%-46s %10.3f s %10.3f s\n", "spawn -> serving (GetStatus answers)", base_serve,
              serve);
  std::printf("%-46s %10.3f s %10.3f s  (%s)\n", "spawn -> first 1-key Lookup answered",
              base_lookup, first_answer, first_was_hit ? "hit" : "miss: probe timed out");
  std::printf("%-46s %12s %10.3f s  (%s after %d lookups, tier %s%s)\n",
              "spawn -> a Lookup of that key hits", "", first_hit,
              first.ok() && *first == 1 ? "hit" : "NO HIT", attempts,
              v1::Tier_Name(first_tier).c_str(),
              warm_at_first_hit ? ", index already warm" : ", index still cold");
  std::printf("%-46s %12s %10.3f s  (bytes %s)\n", "spawn -> that block loaded (L2 -> L1)", "",
              first_load, bytes_ok ? "match" : "DIFFER");
  std::printf("%-46s %12s %10.3f s  (%lu blocks indexed; RSS then %s)\n",
              "spawn -> index warm (ListTiers index_warm)", "", warm, warm_blocks, rss.c_str());
  std::printf("daemon log: %s\n", WarmLogLine(log).c_str());
  std::printf("\n1-key Lookups of random known keys    %6s %6s %10s %10s\n", "tries", "hits",
              "p50 (us)", "p99 (us)");
  std::printf("  during warm-up (lazy probe path)    %6d %6d %10.1f %10.1f\n", lazy.tries,
              lazy.hits, lazy.latency.p50_us, lazy.latency.p99_us);
  std::printf("  after warm-up (index)               %6d %6d %10.1f %10.1f\n", indexed.tries,
              indexed.hits, indexed.latency.p50_us, indexed.latency.p99_us);
  std::printf(
      "\n{\"bench\": \"l2_restart\", \"files\": %lu, \"payload_bytes\": %lu, "
      "\"baseline_serve_s\": %.4f, \"baseline_first_lookup_s\": %.4f, \"serve_s\": %.4f, "
      "\"first_answer_s\": %.4f, \"first_answer_hit\": %s, \"first_hit_s\": %.4f, "
      "\"first_hit\": %s, \"lookups_to_first_hit\": %d, \"first_load_s\": %.4f, \"bytes_ok\": %s, "
      "\"index_warm_s\": %.3f, \"indexed_blocks\": %lu, \"lazy_p50_us\": %.1f, "
      "\"lazy_p99_us\": %.1f, \"lazy_hits\": %d, \"lazy_tries\": %d, \"index_p50_us\": %.1f, "
      "\"index_p99_us\": %.1f, \"drop_caches\": %s}\n",
      flags.files, flags.payload, base_serve, base_lookup, serve, first_answer,
      first_was_hit ? "true" : "false", first_hit, first.ok() && *first == 1 ? "true" : "false",
      attempts, first_load, bytes_ok ? "true" : "false", warm, warm_blocks, lazy.latency.p50_us,
      lazy.latency.p99_us, lazy.hits, lazy.tries, indexed.latency.p50_us, indexed.latency.p99_us,
      drop_caches ? "true" : "false");
  const bool ok = first.ok() && *first == 1 && bytes_ok && warm >= 0 && warm_blocks >= flags.files;
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace kvstrata::bench

int main(int argc, char** argv) { return kvstrata::bench::Main(argc, argv); }
