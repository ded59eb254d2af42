// l2_fio: L2 reads and writes beside fio(1) with the same access pattern, on the same disk,
// in the same run (issue 43 item 3: the tier at >= 90 % of what the device gives).
//
// The pattern is the daemon's: one block file per block (header + payload; --payload_kib),
// one O_DIRECT I/O of the whole file per block, `--depth` I/Os in flight (l2.io_threads:
// the tier's IoPool threads, each with one block's I/O at a time).
//   KVStrata write: FileTier::Write of every block from a page-aligned source (an L1 slot),
//                   one IoPool task per block at background priority (WriteDown's tasks);
//   KVStrata read:  FileTier::Read into page-aligned memory, in tasks at urgent priority
//                   split as the Promoter splits a batch (Promoter::BlocksPerTask);
//   fio:            --direct=1 --bs=<file> --filesize=<file>, ioengine psync with
//                   numjobs=<depth> (the same pattern), and for reads also io_uring with
//                   iodepth=<depth> in one thread on the same files (the same depth
//                   through io_uring).
// Printed for each: CPU (user + system) per block (the tier's process, or the fio
// process with its set-up), aggregate GB/s (payload bytes for the tier, file bytes for fio: the
// tier's figure is the stricter by 4 KiB per file), p50/p99 of one block's I/O, and p50/p99
// of the time the run took for each 64 consecutive completions (--request_blocks: one
// prompt's blocks) — computed the same way from fio's per-I/O log and from the tier's
// per-call times (fio's per-I/O write time leaves out its file creation; the tier's
// per-block time includes create, checksum and rename). Then one prompt's load as the
// daemon serves it: requests of 64 blocks, --queued of them outstanding at once (a closed
// loop: when one completes the next is submitted), each submitted as the Promoter does; its
// time from submit to its last block, beside what a FIFO disk gives each of `queued`
// outstanding prompts: queued x fio's 64-block time.
// Diagnostic row: the tier's own files read again as fio reads its files (open O_DIRECT,
// one pread, close) on the same threads: FileTier's code against where its files lie.
// In a round each fio phase runs next to the tier's phase of the same kind, the order
// flipped every other round; verdicts use the median over the rounds of the per-round ratio
// KVStrata / fio psync.
//
// Usage: l2_fio [--dir=DIR (default /var/tmp)] [--gib=1 (per phase)] [--rounds=3]
//               [--payload_kib=2048] [--depth=4] [--request_blocks=64] [--queued=4]
//               [--blocks_per_task=N (default: as the Promoter splits; 8 = before
//               issue 43)] [--no-fio] [--out=FILE.json]
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <latch>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "bench/tiers/fio_runner.h"
#include "bench/tiers/io_timeline.h"
#include "bench/tiers/tier_bench_util.h"
#include "daemon/tiering/promoter.h"
#include "daemon/tiers/block_file_format.h"
#include "daemon/tiers/block_path.h"
#include "daemon/tiers/io_pool.h"
#include "spdlog/spdlog.h"

namespace kvstrata::bench {
namespace {

constexpr double kTarget = 0.90;

struct Flags {
  std::string dir = "/var/tmp";
  double gib = 1.0;
  int rounds = 3;
  uint64_t payload_kib = 2048;
  int depth = 4;
  size_t request_blocks = 64;
  size_t queued = 4;
  size_t blocks_per_task = 0;  // 0: Promoter::BlocksPerTask, as the daemon splits a batch
  bool fio = true;
  std::string out;
};

// One measured side of one round.
struct Figures {
  double gbps = 0;
  Percentiles block_ms, window_ms;
  size_t failures = 0;
  double cpu_us = 0;  // CPU (user + system) per block, in microseconds
};

Figures FiguresOf(const IoTimeline& ios, size_t window, double gbps, double cpu_seconds) {
  return Figures{gbps, ios.Latency(), ios.WindowTime(window), 0,
                 ios.size() == 0 ? 0 : cpu_seconds * 1e6 / static_cast<double>(ios.size())};
}

struct Round {
  Figures tier_write, tier_read, fio_write, fio_read, uring_read;
  Figures raw_read;        // diagnostic: the tier's own files, one raw O_DIRECT pread each
  Percentiles request_ms;  // the daemon-style prompt loads
  double request_gbps = 0;
  bool have_fio = false;
};

// Runs `count` tasks on `pool`, task i doing blocks [i * per_task, ...): fn(block) -> ok,
// timed per block; returns when all ran.
IoTimeline RunOnPool(IoPool& pool, IoPool::Priority priority, size_t blocks, size_t per_task,
                     uint64_t bytes_per_block, const std::function<bool(size_t)>& fn,
                     size_t* failures) {
  std::vector<double> start(blocks), end(blocks);
  std::atomic<size_t> failed{0};
  std::latch done(static_cast<std::ptrdiff_t>((blocks + per_task - 1) / per_task));
  for (size_t begin = 0; begin < blocks; begin += per_task) {
    pool.Submit(priority, [&, begin] {
      for (size_t b = begin; b < std::min(blocks, begin + per_task); ++b) {
        start[b] = MonotonicSeconds();
        if (!fn(b)) failed.fetch_add(1);
        end[b] = MonotonicSeconds();
      }
      done.count_down();
    });
  }
  done.wait();
  IoTimeline ios;
  for (size_t b = 0; b < blocks; ++b) ios.Add(start[b], end[b], bytes_per_block);
  *failures += failed.load();
  return ios;
}

// How the daemon splits a batch of `blocks` into I/O tasks (or --blocks_per_task).
size_t PerTask(const Flags& flags, size_t blocks) {
  if (flags.blocks_per_task > 0) return flags.blocks_per_task;
  return Promoter::BlocksPerTask(blocks, static_cast<size_t>(flags.depth));
}

// The prompt loads: requests of `request_blocks` blocks, `queued` outstanding at once,
// each split into urgent tasks as the Promoter splits a batch. Their submit-to-done
// times, in ms.
Percentiles RunRequests(IoPool& pool, size_t blocks, const Flags& flags,
                        const std::function<bool(size_t)>& read, size_t* failures) {
  const size_t requests = blocks / flags.request_blocks;
  std::mutex mu;
  std::condition_variable cv;
  size_t outstanding = 0;
  std::vector<double> submitted(requests), finished(requests);
  std::vector<size_t> left(requests, flags.request_blocks);
  std::atomic<size_t> failed{0};
  auto submit = [&](size_t r) {
    submitted[r] = MonotonicSeconds();
    const size_t first = r * flags.request_blocks;
    const size_t per_task = PerTask(flags, flags.request_blocks);
    for (size_t begin = 0; begin < flags.request_blocks; begin += per_task) {
      const size_t end = std::min(flags.request_blocks, begin + per_task);
      pool.Submit(IoPool::Priority::kUrgent, [&, r, first, begin, end] {
        for (size_t b = first + begin; b < first + end; ++b) {
          if (!read(b)) failed.fetch_add(1);
        }
        std::lock_guard<std::mutex> lock(mu);
        left[r] -= end - begin;
        if (left[r] == 0) {
          finished[r] = MonotonicSeconds();
          --outstanding;
          cv.notify_all();
        }
      });
    }
  };
  for (size_t r = 0; r < requests; ++r) {
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return outstanding < flags.queued; });
      ++outstanding;
    }
    submit(r);
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return outstanding == 0; });
  }
  std::vector<double> ms;
  for (size_t r = 0; r < requests; ++r) ms.push_back((finished[r] - submitted[r]) * 1e3);
  *failures += failed.load();
  return PercentilesOf(std::move(ms));
}

absl::StatusOr<std::unique_ptr<FileTier>> OpenTier(const std::string& root) {
  FileTierOptions options;
  options.name = "l2";
  options.tier = Tier::kL2;
  options.root = root;
  options.capacity_bytes = 1ULL << 40;
  options.fsync = FsyncPolicy::kNone;  // the daemon's default (l2.fsync = "none")
  return FileTier::Open(options);
}

// One round: the tier's phases and fio's, each fio phase next to the tier's of the same
// kind (the disk's speed drifts between seconds), the order flipped every other round.
void RunRound(const Flags& flags, const std::string& root, int round, size_t blocks, bool fio,
              Round& out) {
  const uint64_t payload = flags.payload_kib << 10;
  absl::StatusOr<TierNamespace> ns = BenchNamespace(payload, absl::StrCat("l2-fio-", round));
  absl::StatusOr<std::unique_ptr<FileTier>> tier = OpenTier(absl::StrCat(root, "/l2"));
  if (!ns.ok() || !tier.ok()) {
    std::fprintf(stderr, "set-up: %s %s\n", ns.status().ToString().c_str(),
                 tier.status().ToString().c_str());
    std::exit(1);
  }
  (*tier)->WaitWarm(absl::Seconds(30));
  std::vector<std::string> keys;
  for (size_t i = 0; i < blocks; ++i) {
    keys.push_back(BenchKey(2000 + round, i));
    // A tier in use has its prefix directories (65,536 per namespace) already.
    const std::string path = *BlockFilePath(absl::StrCat(root, "/l2"), ns->fingerprint, keys[i]);
    (void)MakeDirectories(path.substr(0, path.rfind('/')));
  }
  AlignedBuffer src = AllocateAligned(payload);
  FillPayload(keys[0], src.get(), payload);
  IoPool pool(static_cast<size_t>(flags.depth));
  auto write = [&](size_t b) {
    return (*tier)->Write(*ns, keys[b], absl::string_view(src.get(), payload)).ok();
  };
  auto read = [&](size_t b) {
    thread_local AlignedBuffer dest;
    thread_local uint64_t dest_bytes = 0;
    if (dest_bytes != payload) dest = AllocateAligned(payload), dest_bytes = payload;
    return (*tier)->Read(*ns, keys[b], absl::MakeSpan(dest.get(), payload));
  };
  size_t failures = 0;
  auto tier_write = [&] {
    const double cpu0 = CpuSeconds(/*children=*/false);
    IoTimeline w =
        RunOnPool(pool, IoPool::Priority::kBackground, blocks, 1, payload, write, &failures);
    out.tier_write =
        FiguresOf(w, flags.request_blocks, w.Gbps(), CpuSeconds(/*children=*/false) - cpu0);
  };
  auto tier_read = [&] {
    const double cpu0 = CpuSeconds(/*children=*/false);
    IoTimeline r = RunOnPool(pool, IoPool::Priority::kUrgent, blocks, PerTask(flags, blocks),
                             payload, read, &failures);
    out.tier_read =
        FiguresOf(r, flags.request_blocks, r.Gbps(), CpuSeconds(/*children=*/false) - cpu0);
  };
  // The tier's files read again with what fio does per file (open O_DIRECT, one pread,
  // close), on the same threads in the same tasks: what the tier's code costs beside where
  // its files lie.
  std::vector<std::string> paths;
  for (const std::string& key : keys) {
    paths.push_back(*BlockFilePath(absl::StrCat(root, "/l2"), ns->fingerprint, key));
  }
  const size_t file_bytes = BlockFileBytes(payload);
  auto raw_read = [&] {
    auto pread_file = [&](size_t b) {
      thread_local AlignedBuffer dest;
      thread_local size_t dest_bytes = 0;
      if (dest_bytes != file_bytes) dest = AllocateAligned(file_bytes), dest_bytes = file_bytes;
      const int fd = ::open(paths[b].c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
      if (fd < 0) return false;
      const bool ok = ::pread(fd, dest.get(), file_bytes, 0) == static_cast<ssize_t>(file_bytes);
      ::close(fd);
      return ok;
    };
    const double cpu0 = CpuSeconds(/*children=*/false);
    IoTimeline r = RunOnPool(pool, IoPool::Priority::kUrgent, blocks, PerTask(flags, blocks),
                             file_bytes, pread_file, &failures);
    out.raw_read =
        FiguresOf(r, flags.request_blocks, r.Gbps(), CpuSeconds(/*children=*/false) - cpu0);
  };
  auto tier_requests = [&] {
    const double t0 = MonotonicSeconds();
    out.request_ms = RunRequests(pool, blocks, flags, read, &failures);
    out.request_gbps =
        static_cast<double>(blocks / flags.request_blocks * flags.request_blocks * payload) /
        (MonotonicSeconds() - t0) / 1e9;
  };
  FioPattern p;
  p.dir = absl::StrCat(root, "/fio");
  p.file_bytes = BlockFileBytes(payload);
  p.files = blocks;
  p.depth = flags.depth;
  bool fio_ok = fio;
  auto fio_run = [&](bool write, const char* engine, Figures* figures) {
    if (!fio_ok) return;
    p.write = write;
    p.engine = engine;
    std::optional<FioRun> run = RunFio(p);
    fio_ok = run.has_value();
    if (run) {
      *figures = FiguresOf(run->ios, flags.request_blocks, run->reported_gbps, run->cpu_seconds);
    }
  };
  auto fio_write = [&] { fio_run(true, "psync", &out.fio_write); };
  auto fio_read = [&] { fio_run(false, "psync", &out.fio_read); };
  auto fio_uring = [&] { fio_run(false, "io_uring", &out.uring_read); };
  ::sync();
  if (round % 2 == 0) {
    fio_write(), tier_write(), fio_read(), tier_read(), raw_read(), fio_uring(), tier_requests();
  } else {
    tier_write(), fio_write(), raw_read(), tier_read(), fio_read(), tier_requests(), fio_uring();
  }
  out.have_fio = fio_ok;
  out.tier_write.failures = out.tier_read.failures = failures;
  pool.Stop();
  (*tier)->Clear(std::nullopt);
  tier->reset();
  Shell(absl::StrCat("rm -rf '", root, "/l2' '", p.dir, "'"));
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The median over the rounds of get(round).
template <typename Get>
double MedianOf(const std::vector<Round>& rounds, Get get) {
  std::vector<double> v;
  for (const Round& r : rounds) v.push_back(get(r));
  return Median(std::move(v));
}

void PrintRow(const char* label, const std::vector<Round>& rounds, Figures Round::*side) {
  std::printf("%-34s %6.2f   %7.2f / %7.2f   %8.1f / %8.1f   %6.0f\n", label,
              MedianOf(rounds, [&](const Round& r) { return (r.*side).gbps; }),
              MedianOf(rounds, [&](const Round& r) { return (r.*side).block_ms.p50; }),
              MedianOf(rounds, [&](const Round& r) { return (r.*side).block_ms.p99; }),
              MedianOf(rounds, [&](const Round& r) { return (r.*side).window_ms.p50; }),
              MedianOf(rounds, [&](const Round& r) { return (r.*side).window_ms.p99; }),
              MedianOf(rounds, [&](const Round& r) { return (r.*side).cpu_us; }));
}

// KVStrata / fio psync for one figure: the median of the per-round ratios. For times,
// fio / KVStrata (so that > 100 % means faster than fio).
using Get = double (*)(const Figures&);
double Ratio(const std::vector<Round>& rounds, Figures Round::*tier, Figures Round::*fio, Get get,
             bool time) {
  std::vector<double> v;
  for (const Round& r : rounds) {
    const double t = get(r.*tier), f = get(r.*fio);
    if (!r.have_fio || f <= 0 || t <= 0) continue;
    v.push_back(time ? f / t : t / f);
  }
  return Median(std::move(v));
}

void PrintReport(const Flags& flags, const std::vector<Round>& rounds, bool fio, size_t blocks) {
  const size_t w = flags.request_blocks;
  std::printf("\n%-34s %6s   %-17s   %-21s %s\n", "(medians over the rounds)", "GB/s",
              "1 block p50/p99 ms", absl::StrCat(w, " blocks p50/p99 ms").c_str(), "CPU us/block");
  if (fio)
    PrintRow(absl::StrCat("write  fio psync x", flags.depth).c_str(), rounds, &Round::fio_write);
  PrintRow("write  KVStrata FileTier::Write", rounds, &Round::tier_write);
  if (fio)
    PrintRow(absl::StrCat("read   fio psync x", flags.depth).c_str(), rounds, &Round::fio_read);
  if (fio) {
    PrintRow(absl::StrCat("read   fio io_uring QD", flags.depth, " (1 thread)").c_str(), rounds,
             &Round::uring_read);
  }
  PrintRow("read   KVStrata FileTier::Read", rounds, &Round::tier_read);
  PrintRow("read   (raw O_DIRECT, tier's files)", rounds, &Round::raw_read);
  std::printf(
      "\nprompt loads (%zu blocks each, %zu outstanding, urgent tasks of %zu blocks): "
      "submit -> last block p50 %.1f ms, p99 %.1f ms; %.2f GB/s\n",
      w, flags.queued, PerTask(flags, w),
      MedianOf(rounds, [](const Round& r) { return r.request_ms.p50; }),
      MedianOf(rounds, [](const Round& r) { return r.request_ms.p99; }),
      MedianOf(rounds, [](const Round& r) { return r.request_gbps; }));
  // The FIFO model below needs a steady state: many more requests than are outstanding.
  const bool steady = blocks / w >= 4 * flags.queued;
  if (fio && !steady) {
    std::printf(
        "  (too few requests for a steady state: no comparison with fio; use more --gib)\n");
  }
  if (fio && steady) {
    // The device's own time for one prompt's blocks at this depth is fio's window time; with
    // `queued` prompts outstanding each waits for its share of the others' (a FIFO disk gives
    // each queued x that). Compared per round.
    std::vector<double> ratios;
    for (const Round& r : rounds) {
      if (!r.have_fio || r.request_ms.p50 <= 0) continue;
      ratios.push_back(static_cast<double>(flags.queued) * r.fio_read.window_ms.p50 /
                       r.request_ms.p50);
    }
    std::printf(
        "  fio psync x%d: %zu blocks in %.1f ms (p50), so %zu outstanding FIFO = %.1f ms: "
        "KVStrata at %.1f %% of that (median of per-round ratios)\n",
        flags.depth, w, MedianOf(rounds, [](const Round& r) { return r.fio_read.window_ms.p50; }),
        flags.queued,
        static_cast<double>(flags.queued) *
            MedianOf(rounds, [](const Round& r) { return r.fio_read.window_ms.p50; }),
        100 * Median(ratios));
  }
  if (!fio) return;
  auto verdict = [](double x) { return x >= kTarget ? "PASS" : "FAIL"; };
  struct Check {
    const char* what;
    Figures Round::*tier;
    Figures Round::*fio;
  };
  std::printf(
      "\nKVStrata vs fio psync x%d (median of per-round ratios; target %.0f %%; times:"
      " fio / KVStrata):\n",
      flags.depth, 100 * kTarget);
  for (const Check& c : {Check{"write", &Round::tier_write, &Round::fio_write},
                         Check{"read ", &Round::tier_read, &Round::fio_read}}) {
    const double gb = Ratio(
        rounds, c.tier, c.fio, [](const Figures& f) { return f.gbps; }, false);
    const double b50 = Ratio(
        rounds, c.tier, c.fio, [](const Figures& f) { return f.block_ms.p50; }, true);
    const double w50 = Ratio(
        rounds, c.tier, c.fio, [](const Figures& f) { return f.window_ms.p50; }, true);
    const double w99 = Ratio(
        rounds, c.tier, c.fio, [](const Figures& f) { return f.window_ms.p99; }, true);
    std::printf(
        "  %s  GB/s %5.1f %% %s   1 block p50 %5.1f %%   %zu blocks p50 %5.1f %% %s, p99 %5.1f "
        "%%\n",
        c.what, 100 * gb, verdict(gb), 100 * b50, w, 100 * w50, verdict(w50), 100 * w99);
  }
}

void PrintRounds(const std::vector<Round>& rounds) {
  std::printf(
      "\nper round, GB/s (fio write, tier write, fio read, fio io_uring read, tier read,"
      " raw read of the tier's files, tier prompt loads); failures\n");
  for (size_t i = 0; i < rounds.size(); ++i) {
    const Round& r = rounds[i];
    std::printf("  round %zu: %.2f %.2f %.2f %.2f %.2f %.2f %.2f; %zu\n", i, r.fio_write.gbps,
                r.tier_write.gbps, r.fio_read.gbps, r.uring_read.gbps, r.tier_read.gbps,
                r.raw_read.gbps, r.request_gbps, r.tier_write.failures);
  }
}

std::string Json(const Flags& flags, const std::vector<Round>& rounds) {
  auto fig = [](const char* name, const Figures& f) {
    return absl::StrCat(
        "\"", name, "\": {\"gbps\": ", f.gbps, ", \"block_ms_p50\": ", f.block_ms.p50,
        ", \"block_ms_p99\": ", f.block_ms.p99, ", \"window_ms_p50\": ", f.window_ms.p50,
        ", \"window_ms_p99\": ", f.window_ms.p99, ", \"cpu_us_per_block\": ", f.cpu_us, "}");
  };
  std::string json =
      absl::StrCat("{\"bench\": \"l2_fio\", \"payload_bytes\": ", flags.payload_kib << 10,
                   ", \"depth\": ", flags.depth, ", \"request_blocks\": ", flags.request_blocks,
                   ", \"queued\": ", flags.queued, ", \"rounds\": [\n");
  for (size_t i = 0; i < rounds.size(); ++i) {
    const Round& r = rounds[i];
    absl::StrAppend(
        &json, "  {", fig("fio_write", r.fio_write), ", ", fig("tier_write", r.tier_write), ", ",
        fig("fio_read", r.fio_read), ", ", fig("fio_uring_read", r.uring_read), ", ",
        fig("tier_read", r.tier_read), ", ", fig("raw_read_tier_files", r.raw_read),
        ", \"request_ms_p50\": ", r.request_ms.p50, ", \"request_ms_p99\": ", r.request_ms.p99,
        ", \"request_gbps\": ", r.request_gbps, "}", i + 1 < rounds.size() ? ",\n" : "\n");
  }
  return json + "]}\n";
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
    if (value("--gib=", &v) && absl::SimpleAtod(v, &flags.gib) && flags.gib > 0) continue;
    if (value("--rounds=", &v) && absl::SimpleAtoi(v, &flags.rounds) && flags.rounds > 0) continue;
    if (value("--payload_kib=", &v) && absl::SimpleAtoi(v, &flags.payload_kib) &&
        flags.payload_kib > 0 && flags.payload_kib <= (1 << 20)) {
      continue;
    }
    if (value("--depth=", &v) && absl::SimpleAtoi(v, &flags.depth) && flags.depth > 0 &&
        flags.depth <= 64) {
      continue;
    }
    if (value("--request_blocks=", &v) && absl::SimpleAtoi(v, &flags.request_blocks) &&
        flags.request_blocks > 0) {
      continue;
    }
    if (value("--queued=", &v) && absl::SimpleAtoi(v, &flags.queued) && flags.queued > 0) continue;
    if (value("--blocks_per_task=", &v) && absl::SimpleAtoi(v, &flags.blocks_per_task)) continue;
    if (arg == "--no-fio") {
      flags.fio = false;
      continue;
    }
    std::fprintf(stderr, "l2_fio: bad argument %s (see the header of l2_fio.cc)\n", argv[i]);
    std::exit(2);
  }
  return flags;
}

int Main(int argc, char** argv) {
  Flags flags = Parse(argc, argv);
  spdlog::set_level(spdlog::level::warn);
  std::optional<std::string> fio = flags.fio ? FioVersion() : std::nullopt;
  if (flags.fio && !fio) {
    std::printf(
        "l2_fio: fio is NOT installed (not on PATH): no fio figures and no verdicts, only "
        "KVStrata's own (bench/tiers/run.sh installs it: apt-get install fio)\n");
  }
  std::string pattern = flags.dir + "/kvstrata-l2fio-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) {
    std::fprintf(stderr, "mkdtemp in %s: %s\n", flags.dir.c_str(), std::strerror(errno));
    return 1;
  }
  const std::string root = pattern;
  const uint64_t payload = flags.payload_kib << 10;
  size_t blocks =
      static_cast<size_t>(flags.gib * 1024 * 1024 / static_cast<double>(flags.payload_kib));
  blocks = std::max(blocks / flags.request_blocks, size_t{1}) * flags.request_blocks;
  blocks = blocks / static_cast<size_t>(flags.depth) * static_cast<size_t>(flags.depth);
  std::printf("l2_fio: %s on %s; %s\n", root.c_str(),
              std::string(absl::StripAsciiWhitespace(
                              Shell("df --output=source,fstype " + root + " | tail -1")))
                  .c_str(),
              fio ? fio->c_str() : "no fio");
  std::printf(
      "pattern: %zu block files of %zu bytes (%llu KiB payload + header, 4 KiB-padded), one "
      "O_DIRECT I/O per file, %d in flight (%d I/O threads); %d rounds; %u CPUs\n",
      blocks, BlockFileBytes(payload), static_cast<unsigned long long>(flags.payload_kib),
      flags.depth, flags.depth, flags.rounds, std::thread::hardware_concurrency());
  std::fflush(stdout);
  std::vector<Round> rounds(static_cast<size_t>(flags.rounds));
  for (int i = 0; i < flags.rounds; ++i) {
    Round& round = rounds[static_cast<size_t>(i)];
    RunRound(flags, root, i, blocks, fio.has_value(), round);
    std::printf("round %d done\n", i);
    std::fflush(stdout);
  }
  Shell(absl::StrCat("rm -rf '", root, "'"));
  PrintReport(flags, rounds, fio.has_value(), blocks);
  PrintRounds(rounds);
  const std::string json = Json(flags, rounds);
  if (!flags.out.empty()) std::ofstream(flags.out) << json;
  return 0;
}

}  // namespace
}  // namespace kvstrata::bench

int main(int argc, char** argv) { return kvstrata::bench::Main(argc, argv); }
