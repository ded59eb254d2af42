// l3_trim: what one trim of a shared (L3) tier costs, by the write journals (how a trim
// works now: daemon/tiers/write_journal.h) against by a scan of the whole tree (the
// baseline, measured in the same run on the same directory: how every trim worked before,
// and what the audit still does). For each way it writes --files block files of --payload
// bytes through a shared FileTier (a "daemon", whose journal spreads them over --minutes
// minutes of a fake clock; the files' mtimes are the filesystem's, which the clock stays
// behind), then opens a second tier (another daemon) whose first round finds the usage
// ledger just past the high mark and deletes --evict-pct % of the files, the oldest first.
// Reported per way: the pass's wall time, files deleted per second, and the stat and
// directory-listing calls it made per deleted file. The two ways get a tree of their own
// (written the same way); the scan's tree has its journal removed first, so its trim falls
// back to the scan, as a trim does when the journals fall short.
//
// Usage: l3_trim [--dir=DIR (the trees' parent, default /var/tmp)] [--files=100000]
//                [--payload=4096] [--minutes=10] [--evict-pct=1] [--out=FILE.json]
#include <stdlib.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "bench/tiers/tier_bench_util.h"
#include "daemon/testing/fake_clock.h"
#include "daemon/testing/fault_file_system.h"
#include "daemon/tiers/shared_usage.h"
#include "spdlog/spdlog.h"

namespace kvstrata::bench {
namespace {

namespace fs = std::filesystem;
constexpr double kHigh = 0.95;

struct Flags {
  std::string dir = "/var/tmp";
  uint64_t files = 100000;
  uint64_t payload = 4096;
  uint64_t minutes = 10;
  double evict_pct = 1;
  std::string out;
};

struct Result {
  std::string way;
  uint64_t deleted = 0;
  double seconds = 0;
  uint64_t stats = 0, listings = 0;
};

FileTierOptions TierOptions(const std::string& root, uint64_t capacity, double low, Clock* clock,
                            BlockFileSystem* files) {
  FileTierOptions o;
  o.name = "l3";
  o.tier = Tier::kL3;
  o.root = root;
  o.shared = true;
  o.capacity_bytes = capacity;
  o.high_watermark = kHigh;
  o.low_watermark = low;
  o.shared_eviction_interval = absl::Hours(1);  // one round: the one at start
  o.access_record_interval = absl::Hours(1);
  o.clock = clock;
  o.files = files;
  return o;
}

// Writes the tree; its total file bytes.
uint64_t WriteTree(const Flags& f, const std::string& root, const TierNamespace& ns,
                   FakeClock* clock) {
  // An empty ledger, audited just now: no round of these tiers is due an audit (whose scan
  // at the writer's start would race with its writes).
  fs::create_directories(root);
  std::ofstream(root + "/.kvstrata-usage")
      << FormatUsageLedger({0, absl::ToUnixMillis(clock->Now()), {}});
  absl::StatusOr<std::unique_ptr<FileTier>> writer =
      FileTier::Open(TierOptions(root, uint64_t{1} << 50, 0.9, clock, nullptr));
  if (!writer.ok()) {
    std::fprintf(stderr, "l3_trim: %s\n", writer.status().ToString().c_str());
    std::exit(1);
  }
  std::string payload(f.payload, '\0');
  const uint64_t per_minute = std::max<uint64_t>(1, f.files / f.minutes);
  for (uint64_t i = 0; i < f.files; ++i) {
    if (i > 0 && i % per_minute == 0) clock->Advance(absl::Minutes(1));
    std::string key = BenchKey(7, i);
    FillPayload(key, payload.data(), payload.size());
    if (absl::Status s = (*writer)->Write(ns, key, payload); !s.ok()) {
      std::fprintf(stderr, "l3_trim: write %llu: %s\n", static_cast<unsigned long long>(i),
                   s.ToString().c_str());
      std::exit(1);
    }
  }
  (*writer)->Stop();                                           // Flushes its journal.
  return f.files * (4096 + (f.payload + 4095) / 4096 * 4096);  // docs/on-disk-format.md
}

Result Trim(const Flags& f, const std::string& way) {
  Result r{way};
  const std::string root = absl::StrCat(f.dir, "/l3-trim-", getpid(), "-", way);
  absl::StatusOr<TierNamespace> ns = BenchNamespace(f.payload, "l3-trim");
  if (!ns.ok()) std::exit(1);
  FakeClock clock(
      absl::FromUnixSeconds(absl::ToUnixSeconds(absl::Now() + absl::Hours(24)) / 60 * 60));
  const double t0 = MonotonicSeconds();
  const uint64_t total = WriteTree(f, root, *ns, &clock);
  std::printf("%-8s wrote %llu files (%.1f MiB) in %.1f s\n", way.c_str(),
              static_cast<unsigned long long>(f.files), total / 1048576.0, MonotonicSeconds() - t0);
  if (way == "scan") fs::remove_all(root + "/.kvstrata-journal");
  clock.Advance(absl::Minutes(3));  // Every bucket closed.
  // Just past the high mark; the low mark --evict-pct % of the files below the usage.
  const uint64_t capacity = static_cast<uint64_t>(static_cast<double>(total) / (kHigh + 0.001));
  const double low = static_cast<double>(total) * (1 - f.evict_pct / 100) / capacity;
  const uint64_t file_bytes = total / f.files;
  const uint64_t expected = static_cast<uint64_t>(
      std::ceil((static_cast<double>(total) - low * static_cast<double>(capacity)) /
                static_cast<double>(file_bytes)));
  std::atomic<uint64_t> stats{0}, listings{0};
  FaultFileSystem counting;
  counting.SetHook([&](absl::string_view op, const std::string&) {
    if (op == "probe") ++stats;
    if (op == "scan") ++listings;
    return absl::OkStatus();
  });
  const double start = MonotonicSeconds();
  absl::StatusOr<std::unique_ptr<FileTier>> trimmer =
      FileTier::Open(TierOptions(root, capacity, low, &clock, &counting));
  if (!trimmer.ok()) std::exit(1);
  while ((*trimmer)->Stats().evictions < expected && MonotonicSeconds() - start < 3600) {
    absl::SleepFor(absl::Microseconds(200));
  }
  r.seconds = MonotonicSeconds() - start;
  r.deleted = (*trimmer)->Stats().evictions;
  (*trimmer)->Stop();
  r.stats = stats;
  r.listings = listings;
  fs::remove_all(root);
  return r;
}

Flags Parse(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg(argv[i]);
    std::string v;
    auto value = [&](absl::string_view name, std::string* out) {
      if (!absl::ConsumePrefix(&arg, name)) return false;
      *out = std::string(arg);
      return true;
    };
    if (value("--dir=", &flags.dir) || value("--out=", &flags.out)) continue;
    if (value("--files=", &v) && absl::SimpleAtoi(v, &flags.files) && flags.files > 0) continue;
    if (value("--payload=", &v) && absl::SimpleAtoi(v, &flags.payload) && flags.payload > 0) {
      continue;
    }
    if (value("--minutes=", &v) && absl::SimpleAtoi(v, &flags.minutes) && flags.minutes > 0) {
      continue;
    }
    if (value("--evict-pct=", &v) && absl::SimpleAtod(v, &flags.evict_pct) && flags.evict_pct > 0 &&
        flags.evict_pct < 50) {
      continue;
    }
    std::fprintf(stderr, "l3_trim: bad argument %s (see the header of l3_trim.cc)\n", argv[i]);
    std::exit(2);
  }
  return flags;
}

int Main(int argc, char** argv) {
  const Flags f = Parse(argc, argv);
  spdlog::set_level(spdlog::level::warn);
  std::printf(
      "l3_trim: %llu files of %llu payload bytes in %llu minutes under %s; one trim "
      "deletes %.2f %% of them\n",
      static_cast<unsigned long long>(f.files), static_cast<unsigned long long>(f.payload),
      static_cast<unsigned long long>(f.minutes), f.dir.c_str(), f.evict_pct);
  Result journal = Trim(f, "journal");
  Result scan = Trim(f, "scan");
  std::printf("\n%-8s %9s %9s %12s %14s %17s\n", "way", "deleted", "seconds", "files/s",
              "stats/deleted", "listings/deleted");
  std::string json = "{\"benchmark\": \"l3_trim\", \"rows\": [\n";
  for (const Result* r : {&journal, &scan}) {
    const double d = std::max<double>(1, static_cast<double>(r->deleted));
    std::printf("%-8s %9llu %9.3f %12.0f %14.2f %17.2f\n", r->way.c_str(),
                static_cast<unsigned long long>(r->deleted), r->seconds, r->deleted / r->seconds,
                r->stats / d, r->listings / d);
    absl::StrAppend(&json, "  {\"way\": \"", r->way, "\", \"files\": ", f.files,
                    ", \"deleted\": ", r->deleted, ", \"seconds\": ", r->seconds,
                    ", \"stats\": ", r->stats, ", \"listings\": ", r->listings, "}",
                    r == &journal ? ",\n" : "\n");
  }
  json += "]}\n";
  std::printf("journal / scan time: %.4f\n", journal.seconds / scan.seconds);
  if (!f.out.empty()) std::ofstream(f.out) << json;
  return journal.deleted > 0 && scan.deleted > 0 ? 0 : 1;
}

}  // namespace
}  // namespace kvstrata::bench

int main(int argc, char** argv) { return kvstrata::bench::Main(argc, argv); }
