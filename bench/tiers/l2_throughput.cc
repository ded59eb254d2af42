// l2_throughput: L2 write and read GB/s through FileTier::Write / FileTier::Read (the
// calls an L2 IoPool thread makes) for 2 MiB and 32 MiB blocks with 1 and 4 threads,
// beside the raw device throughput measured in the same run, in the same directory, with
// files of the same size (header + payload):
//   raw O_DIRECT: what `dd oflag=direct bs=<file> count=1` / `dd iflag=direct` does, per
//                 file, in this process on the same threads (open, one pwrite/pread, close);
//   fio:          fio --direct=1 (psync, one I/O per file, numjobs = threads), when fio is
//                 on PATH;
//   dd:           one `dd oflag=direct` / `dd iflag=direct` process per file (1 thread).
// Target: FileTier >= 85% of raw O_DIRECT. Reads go into 4 KiB-aligned buffers (FileTier
// then reads the payload's pages with O_DIRECT); every file is written with O_DIRECT, and
// the page-cache residency of the files is checked (mincore) before each read phase and
// printed, so no read is served from the page cache. The tier's prefix directories exist
// before the writes (as in a tier in use). Rounds alternate which side goes first; the
// table shows each figure's median over the rounds, and tier/raw as the median of the
// per-round ratios (raw and tier of one round run back to back).
//
// Usage: l2_throughput [--dir=DIR (default /var/tmp)] [--gib=1 (per phase)] [--rounds=3]
//                      [--sizes=2,32 (MiB)] [--threads=1,4] [--no-fio] [--no-dd]
//                      [--out=FILE.json]
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <latch>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "bench/tiers/tier_bench_util.h"
#include "daemon/tiers/block_file_format.h"
#include "daemon/tiers/block_path.h"
#include "spdlog/spdlog.h"

namespace kvstrata::bench {
namespace {

constexpr double kTarget = 0.85;

struct Flags {
  std::string dir = "/var/tmp";
  double gib = 1.0;
  int rounds = 3;
  std::vector<uint64_t> sizes_mib = {2, 32};
  std::vector<int> threads = {1, 4};
  bool fio = true, dd = true;
  std::string out;
};

// Runs fn(thread, index) for index in [0, count) split over `threads` threads; returns
// the wall seconds from the common start to the last thread's end. False results count.
double RunParallel(int threads, size_t count, const std::function<bool(int, size_t)>& fn,
                   std::atomic<size_t>* failures) {
  std::latch start(threads + 1);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      start.arrive_and_wait();
      for (size_t i = t; i < count; i += threads) {
        if (!fn(t, i)) failures->fetch_add(1);
      }
    });
  }
  start.arrive_and_wait();
  const double t0 = MonotonicSeconds();
  for (std::thread& t : pool) t.join();
  return MonotonicSeconds() - t0;
}

std::string Shell(const std::string& command) {
  std::string output;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return output;
  char buffer[4096];
  while (size_t n = std::fread(buffer, 1, sizeof(buffer), pipe)) output.append(buffer, n);
  ::pclose(pipe);
  return output;
}

// Fraction of the files' pages that are in the page cache.
double Resident(const std::vector<std::string>& paths) {
  uint64_t pages = 0, resident = 0;
  const long page = ::sysconf(_SC_PAGESIZE);
  for (const std::string& path : paths) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    struct stat st;
    if (::fstat(fd, &st) == 0 && st.st_size > 0) {
      void* map = ::mmap(nullptr, st.st_size, PROT_READ, MAP_SHARED, fd, 0);
      if (map != MAP_FAILED) {
        std::vector<unsigned char> vec((st.st_size + page - 1) / page);
        if (::mincore(map, st.st_size, vec.data()) == 0) {
          for (unsigned char v : vec) resident += v & 1;
          pages += vec.size();
        }
        ::munmap(map, st.st_size);
      }
    }
    ::close(fd);
  }
  return pages == 0 ? 0 : static_cast<double>(resident) / pages;
}

bool RawWrite(const std::string& path, const char* data, size_t bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_DIRECT, 0644);
  if (fd < 0) return false;
  bool ok = ::pwrite(fd, data, bytes, 0) == static_cast<ssize_t>(bytes);
  ok = ::close(fd) == 0 && ok;
  return ok;
}

bool RawRead(const std::string& path, char* out, size_t bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
  if (fd < 0) return false;
  size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::pread(fd, out + done, bytes - done, static_cast<off_t>(done));
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return done == bytes;
}

struct Phase {
  std::vector<double> gbps;  // one per round
  double resident = 0;       // page-cache residency before a read phase (max over rounds)
  size_t failures = 0;
  double Median() const {
    if (gbps.empty()) return 0;
    std::vector<double> v = gbps;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  }
};

// Median over the rounds of tier / raw from the same round: the two ran back to back, so
// the pairing cancels the drift of a shared machine between rounds.
double PairedRatio(const Phase& tier, const Phase& raw) {
  std::vector<double> ratios;
  for (size_t i = 0; i < tier.gbps.size() && i < raw.gbps.size(); ++i) {
    if (raw.gbps[i] > 0) ratios.push_back(tier.gbps[i] / raw.gbps[i]);
  }
  if (ratios.empty()) return 0;
  std::sort(ratios.begin(), ratios.end());
  return ratios[ratios.size() / 2];
}

struct Row {
  uint64_t payload = 0;
  int threads = 0;
  size_t blocks = 0;
  Phase raw_write, tier_write, raw_read, tier_read;
  Phase raw_read_tier_files, tier_read_interleaved;  // diagnostic: the tier's files again
  double fio_write = -1, fio_read = -1, dd_write = -1, dd_read = -1;
};

double Gbps(uint64_t bytes, double seconds) { return seconds > 0 ? bytes / seconds / 1e9 : 0; }

// One round of the four phases for one configuration.
void Round(const Flags& flags, const std::string& root, int round, Row& row) {
  const uint64_t payload = row.payload;
  const size_t file_bytes = BlockFileBytes(payload);
  const int threads = row.threads;
  const size_t blocks = row.blocks;
  absl::StatusOr<TierNamespace> ns = BenchNamespace(payload, absl::StrCat("l2-throughput-", round));
  if (!ns.ok()) {
    std::fprintf(stderr, "namespace: %s\n", ns.status().ToString().c_str());
    std::exit(1);
  }
  const std::string raw_dir = absl::StrCat(root, "/raw");
  const std::string tier_dir = absl::StrCat(root, "/l2");
  (void)MakeDirectories(raw_dir);
  FileTierOptions options;
  options.name = "l2";
  options.tier = Tier::kL2;
  options.root = tier_dir;
  options.capacity_bytes = 1ULL << 40;
  options.fsync = FsyncPolicy::kNone;  // the daemon's default (l2.fsync = "none")
  absl::StatusOr<std::unique_ptr<FileTier>> tier = FileTier::Open(options);
  if (!tier.ok()) {
    std::fprintf(stderr, "FileTier::Open: %s\n", tier.status().ToString().c_str());
    std::exit(1);
  }
  (*tier)->WaitWarm(absl::Seconds(30));

  // One source buffer per thread (the L1 slot a write-through copies from) and one
  // destination (the L1 slot a promotion reads into), both page-aligned.
  std::vector<AlignedBuffer> src, dst;
  for (int t = 0; t < threads; ++t) {
    src.push_back(AllocateAligned(file_bytes));
    dst.push_back(AllocateAligned(file_bytes));
    FillPayload(BenchKey(round, t), src.back().get(), file_bytes);
  }
  std::vector<std::string> keys, raw_paths, tier_paths;
  for (size_t i = 0; i < blocks; ++i) {
    keys.push_back(BenchKey(1000 + round, i));
    raw_paths.push_back(absl::StrCat(raw_dir, "/", i, ".raw"));
    tier_paths.push_back(*BlockFilePath(tier_dir, ns->fingerprint, keys.back()));
    // A tier in use has its prefix directories already (65,536 per namespace); creating
    // them is not what this measures (the raw files go to one existing directory).
    (void)MakeDirectories(tier_paths.back().substr(0, tier_paths.back().rfind('/')));
  }
  const uint64_t total = static_cast<uint64_t>(blocks) * payload;
  const uint64_t raw_total = static_cast<uint64_t>(blocks) * file_bytes;

  // One timed phase: `op` on every block over the threads, into `phase` as GB/s of `bytes`.
  auto timed = [&](Phase& phase, uint64_t bytes, const std::function<bool(int, size_t)>& op) {
    std::atomic<size_t> failures{0};
    double s = RunParallel(threads, blocks, op, &failures);
    phase.gbps.push_back(Gbps(bytes, s));
    phase.failures += failures;
  };
  auto raw_write = [&] {
    timed(row.raw_write, raw_total,
          [&](int t, size_t i) { return RawWrite(raw_paths[i], src[t].get(), file_bytes); });
  };
  auto tier_write = [&] {
    timed(row.tier_write, total, [&](int t, size_t i) {
      return (*tier)->Write(*ns, keys[i], absl::string_view(src[t].get(), payload)).ok();
    });
  };
  auto raw_read = [&] {
    row.raw_read.resident = std::max(row.raw_read.resident, Resident(raw_paths));
    timed(row.raw_read, raw_total,
          [&](int t, size_t i) { return RawRead(raw_paths[i], dst[t].get(), file_bytes); });
  };
  // Diagnostic: the tier's own files read again, file by file alternating between a raw
  // O_DIRECT pread and FileTier::Read (same files, same conditions), timed per call.
  auto raw_read_tier_files = [&] {
    std::vector<std::vector<double>> raw_s(threads), tier_s(threads);
    std::atomic<size_t> failures{0};
    RunParallel(
        threads, blocks,
        [&](int t, size_t i) {
          const bool raw = (i / threads + round) % 2 == 0;
          const double t0 = MonotonicSeconds();
          const bool ok = raw ? RawRead(tier_paths[i], dst[t].get(), file_bytes)
                              : (*tier)->Read(*ns, keys[i], absl::MakeSpan(dst[t].get(), payload));
          (raw ? raw_s : tier_s)[t].push_back(MonotonicSeconds() - t0);
          return ok;
        },
        &failures);
    double raw_sum = 0, tier_sum = 0;
    size_t raw_n = 0, tier_n = 0;
    for (int t = 0; t < threads; ++t) {
      for (double x : raw_s[t]) raw_sum += x, ++raw_n;
      for (double x : tier_s[t]) tier_sum += x, ++tier_n;
    }
    // Per-thread throughput times the threads: comparable between the two methods.
    row.raw_read_tier_files.gbps.push_back(Gbps(raw_n * file_bytes, raw_sum / threads));
    row.tier_read_interleaved.gbps.push_back(Gbps(tier_n * payload, tier_sum / threads));
    row.raw_read_tier_files.failures += failures;
  };
  auto tier_read = [&] {
    row.tier_read.resident = std::max(row.tier_read.resident, Resident(tier_paths));
    timed(row.tier_read, total, [&](int t, size_t i) {
      return (*tier)->Read(*ns, keys[i], absl::MakeSpan(dst[t].get(), payload));
    });
  };
  ::sync();
  if (round % 2 == 0) {
    raw_write(), tier_write(), raw_read(), tier_read(), raw_read_tier_files();
  } else {
    tier_write(), raw_write(), raw_read_tier_files(), tier_read(), raw_read();
  }
  (*tier)->Clear(std::nullopt);
  tier->reset();
  Shell(absl::StrCat("rm -rf '", raw_dir, "' '", tier_dir, "'"));
  (void)flags;
}

// fio --minimal (terse v3): field 7 is the read bandwidth, field 48 the write bandwidth
// (KiB/s), 1-based.
double FioGbps(const std::string& output, bool write) {
  for (absl::string_view line : absl::StrSplit(output, '\n')) {
    std::vector<absl::string_view> fields = absl::StrSplit(line, ';');
    if (fields.size() < 50 || fields[0] != "3") continue;
    double kib = 0;
    if (absl::SimpleAtod(fields[write ? 47 : 6], &kib)) return kib * 1024 / 1e9;
  }
  std::fprintf(stderr, "fio: could not parse:\n%s\n", output.c_str());
  return -1;
}

void RunFio(const std::string& root, Row& row) {
  const size_t file_bytes = BlockFileBytes(row.payload);
  const std::string dir = absl::StrCat(root, "/fio");
  (void)MakeDirectories(dir);
  const std::string common = absl::StrCat(
      "fio --name=tb --directory=", dir, " --bs=", file_bytes, " --filesize=", file_bytes,
      " --nrfiles=", row.blocks / row.threads, " --numjobs=", row.threads,
      " --direct=1 --ioengine=psync --openfiles=1 --file_service_type=sequential",
      " --group_reporting --minimal");
  row.fio_write = FioGbps(Shell(common + " --rw=write --create_on_open=1"), true);
  row.fio_read = FioGbps(Shell(common + " --rw=read"), false);
  Shell(absl::StrCat("rm -rf '", dir, "'"));
}

// One dd process per file, one thread (what a shell loop of dd does).
void RunDd(const std::string& root, Row& row) {
  const size_t file_bytes = BlockFileBytes(row.payload);
  const std::string dir = absl::StrCat(root, "/dd");
  (void)MakeDirectories(dir);
  const std::string loop = absl::StrCat("for i in $(seq 1 ", row.blocks, "); do dd ");
  double t0 = MonotonicSeconds();
  Shell(absl::StrCat(loop, "if=/dev/zero of=", dir, "/$i bs=", file_bytes,
                     " count=1 oflag=direct status=none; done"));
  row.dd_write = Gbps(row.blocks * file_bytes, MonotonicSeconds() - t0);
  t0 = MonotonicSeconds();
  Shell(absl::StrCat(loop, "if=", dir, "/$i of=/dev/null bs=", file_bytes,
                     " iflag=direct status=none; done"));
  row.dd_read = Gbps(row.blocks * file_bytes, MonotonicSeconds() - t0);
  Shell(absl::StrCat("rm -rf '", dir, "'"));
}

// What the write and read paths spend on the CPU per GB, single thread: the XXH3
// checksum (computed on write, verified on read) and one memcpy (the write path's copy
// into its aligned staging buffer).
void PrintCpuCosts() {
  const size_t bytes = 32 << 20;
  AlignedBuffer a = AllocateAligned(bytes), b = AllocateAligned(bytes);
  FillPayload(BenchKey(9, 9), a.get(), bytes);
  const std::string fp(32, 'a');
  double t0 = MonotonicSeconds();
  int reps = 8;
  for (int i = 0; i < reps; ++i) {
    (void)MakeBlockHeader(fp, "k", absl::string_view(a.get(), bytes), 0);
  }
  const double xxh = Gbps(uint64_t{bytes} * reps, MonotonicSeconds() - t0);
  t0 = MonotonicSeconds();
  for (int i = 0; i < reps; ++i) {
    std::memcpy(b.get(), a.get(), bytes);
    a.get()[i] = b.get()[bytes - 1 - i];
  }
  const double copy = Gbps(uint64_t{bytes} * reps, MonotonicSeconds() - t0);
  std::printf("CPU, 1 thread, 32 MiB buffers: XXH3-64 %.1f GB/s, memcpy %.1f GB/s\n\n", xxh, copy);
}

void PrintTable(const std::vector<Row>& rows, const Flags& flags) {
  std::printf("%-7s %3s %6s | %-22s | %-22s | %s\n", "block", "thr", "blocks",
              "write GB/s: raw  tier", "read GB/s:  raw  tier",
              "tier/raw write, read (median of per-round ratios; target 85%)");
  for (const Row& r : rows) {
    const double w = PairedRatio(r.tier_write, r.raw_write);
    const double rd = PairedRatio(r.tier_read, r.raw_read);
    std::printf(
        "%4llu MiB %3d %6zu |            %5.2f %5.2f |            %5.2f %5.2f | %5.1f%% %s, "
        "%5.1f%% %s\n",
        static_cast<unsigned long long>(r.payload >> 20), r.threads, r.blocks, r.raw_write.Median(),
        r.tier_write.Median(), r.raw_read.Median(), r.tier_read.Median(), 100 * w,
        w >= kTarget ? "PASS" : "FAIL", 100 * rd, rd >= kTarget ? "PASS" : "FAIL");
  }
  std::printf("(GB/s columns: medians over the rounds)\n");
  std::printf(
      "\nthe tier's own files read again, alternating per file between raw O_DIRECT "
      "and FileTier::Read (GB/s from per-call times):\n");
  for (const Row& r : rows) {
    std::printf("  %4llu MiB %dT: raw %.2f  tier %.2f  (%.1f%%)\n",
                static_cast<unsigned long long>(r.payload >> 20), r.threads,
                r.raw_read_tier_files.Median(), r.tier_read_interleaved.Median(),
                100 * r.tier_read_interleaved.Median() / r.raw_read_tier_files.Median());
  }
  std::printf(
      "\n\nper round (GB/s; raw write, tier write, raw read, tier read); page cache "
      "resident before reads (raw, tier); failures\n");
  for (const Row& r : rows) {
    std::printf("%4llu MiB %dT:", static_cast<unsigned long long>(r.payload >> 20), r.threads);
    for (size_t i = 0; i < r.raw_write.gbps.size(); ++i) {
      std::printf("  [%.2f %.2f %.2f %.2f]", r.raw_write.gbps[i], r.tier_write.gbps[i],
                  r.raw_read.gbps[i], r.tier_read.gbps[i]);
    }
    std::printf(
        "  cached %.1f%% %.1f%%  failures %zu\n", 100 * r.raw_read.resident,
        100 * r.tier_read.resident,
        r.raw_write.failures + r.tier_write.failures + r.raw_read.failures + r.tier_read.failures);
  }
  if (flags.fio || flags.dd) {
    std::printf("\nexternal tools, same files sizes, same directory, one run (GB/s)\n");
    for (const Row& r : rows) {
      std::printf("%4llu MiB %dT:", static_cast<unsigned long long>(r.payload >> 20), r.threads);
      if (r.fio_write >= 0) std::printf("  fio write %.2f read %.2f", r.fio_write, r.fio_read);
      if (r.dd_write >= 0) std::printf("  dd write %.2f read %.2f", r.dd_write, r.dd_read);
      std::printf("\n");
    }
  }
}

std::string Json(const std::vector<Row>& rows) {
  std::string json = "{\"bench\": \"l2_throughput\", \"rows\": [\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    absl::StrAppend(&json, "  {\"payload_bytes\": ", r.payload, ", \"threads\": ", r.threads,
                    ", \"blocks\": ", r.blocks, ", \"raw_write_gbps\": ", r.raw_write.Median(),
                    ", \"tier_write_gbps\": ", r.tier_write.Median(),
                    ", \"raw_read_gbps\": ", r.raw_read.Median(),
                    ", \"tier_read_gbps\": ", r.tier_read.Median(),
                    ", \"write_ratio\": ", PairedRatio(r.tier_write, r.raw_write),
                    ", \"read_ratio\": ", PairedRatio(r.tier_read, r.raw_read),
                    ", \"interleaved_raw_read_gbps\": ", r.raw_read_tier_files.Median(),
                    ", \"interleaved_tier_read_gbps\": ", r.tier_read_interleaved.Median(),
                    ", \"fio_write_gbps\": ", r.fio_write, ", \"fio_read_gbps\": ", r.fio_read,
                    ", \"dd_write_gbps\": ", r.dd_write, ", \"dd_read_gbps\": ", r.dd_read, "}",
                    i + 1 < rows.size() ? ",\n" : "\n");
  }
  return json + "]}\n";
}

Flags Parse(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg(argv[i]);
    auto value = [&](absl::string_view name, std::string* out) {
      if (!absl::ConsumePrefix(&arg, name)) return false;
      *out = std::string(arg);
      return true;
    };
    std::string v;
    if (value("--dir=", &flags.dir)) continue;
    if (value("--out=", &flags.out)) continue;
    if (value("--gib=", &v) && absl::SimpleAtod(v, &flags.gib) && flags.gib > 0) continue;
    if (value("--rounds=", &v) && absl::SimpleAtoi(v, &flags.rounds) && flags.rounds > 0) continue;
    if (value("--sizes=", &v)) {
      flags.sizes_mib.clear();
      for (absl::string_view s : absl::StrSplit(v, ',')) {
        uint64_t mib = 0;
        if (!absl::SimpleAtoi(s, &mib) || mib == 0 || mib > 1024) std::exit(2);
        flags.sizes_mib.push_back(mib);
      }
      continue;
    }
    if (value("--threads=", &v)) {
      flags.threads.clear();
      for (absl::string_view s : absl::StrSplit(v, ',')) {
        int t = 0;
        if (!absl::SimpleAtoi(s, &t) || t <= 0 || t > 64) std::exit(2);
        flags.threads.push_back(t);
      }
      continue;
    }
    if (arg == "--no-fio") {
      flags.fio = false;
      continue;
    }
    if (arg == "--no-dd") {
      flags.dd = false;
      continue;
    }
    std::fprintf(stderr, "l2_throughput: bad argument %s (see the header of l2_throughput.cc)\n",
                 argv[i]);
    std::exit(2);
  }
  return flags;
}

int Main(int argc, char** argv) {
  Flags flags = Parse(argc, argv);
  spdlog::set_level(spdlog::level::warn);
  if (flags.fio && Shell("command -v fio").empty()) {
    std::printf("fio not on PATH: no fio rows (apt-get install fio)\n");
    flags.fio = false;
  }
  std::string pattern = flags.dir + "/kvstrata-l2tp-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) {
    std::fprintf(stderr, "mkdtemp in %s: %s\n", flags.dir.c_str(), std::strerror(errno));
    return 1;
  }
  const std::string root = pattern;
  std::printf(
      "l2_throughput: %s (%s), %.2f GiB per phase, %d rounds, %u CPUs\n", root.c_str(),
      Shell("df --output=source,fstype " + root + " | tail -1 | tr -s ' ' | tr -d '\n'").c_str(),
      flags.gib, flags.rounds, std::thread::hardware_concurrency());
  PrintCpuCosts();
  std::vector<Row> rows;
  for (uint64_t mib : flags.sizes_mib) {
    for (int threads : flags.threads) {
      Row row;
      row.payload = mib << 20;
      row.threads = threads;
      row.blocks = std::max<size_t>(threads, static_cast<size_t>(flags.gib * 1024 / mib));
      row.blocks = row.blocks / threads * threads;
      for (int round = 0; round < flags.rounds; ++round) Round(flags, root, round, row);
      if (flags.fio) RunFio(root, row);
      if (flags.dd && threads == 1) RunDd(root, row);
      std::printf("done: %llu MiB x %d threads\n", static_cast<unsigned long long>(mib), threads);
      std::fflush(stdout);
      rows.push_back(std::move(row));
    }
  }
  Shell(absl::StrCat("rm -rf '", root, "'"));
  std::printf("\n");
  PrintTable(rows, flags);
  const std::string json = Json(rows);
  if (!flags.out.empty()) std::ofstream(flags.out) << json;
  std::printf("\n%s", json.c_str());
  return 0;
}

}  // namespace
}  // namespace kvstrata::bench

int main(int argc, char** argv) { return kvstrata::bench::Main(argc, argv); }
