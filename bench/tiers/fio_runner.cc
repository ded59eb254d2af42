#include "bench/tiers/fio_runner.h"

#include <sys/resource.h>

#include <cstdio>
#include <fstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "daemon/tiers/block_file_io.h"

namespace kvstrata::bench {

std::string Shell(const std::string& command) {
  std::string output;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return output;
  char buffer[4096];
  while (size_t n = std::fread(buffer, 1, sizeof(buffer), pipe)) output.append(buffer, n);
  ::pclose(pipe);
  return output;
}

double CpuSeconds(bool children) {
  struct rusage usage;
  if (::getrusage(children ? RUSAGE_CHILDREN : RUSAGE_SELF, &usage) != 0) return 0;
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

std::optional<std::string> FioVersion() {
  if (Shell("command -v fio").empty()) return std::nullopt;
  return std::string(absl::StripAsciiWhitespace(Shell("fio --version")));
}

namespace {

// fio --minimal (terse v3): field 7 is the read bandwidth, field 48 the write bandwidth
// (KiB/s), 1-based.
double TerseGbps(const std::string& output, bool write) {
  for (absl::string_view line : absl::StrSplit(output, '\n')) {
    std::vector<absl::string_view> fields = absl::StrSplit(line, ';');
    if (fields.size() < 50 || fields[0] != "3") continue;
    double kib = 0;
    if (absl::SimpleAtod(fields[write ? 47 : 6], &kib)) return kib * 1024 / 1e9;
  }
  return -1;
}

// One job's `<prefix>_lat.<job>.log`: "<unix ms of the end>, <latency ns>, <dir>, <bs>, ..."
// per I/O (--log_avg_msec=0 --log_unix_epoch=1).
bool ReadLatLog(const std::string& path, IoTimeline* ios) {
  std::ifstream in(path);
  if (!in) return false;
  std::string line;
  while (std::getline(in, line)) {
    std::vector<absl::string_view> f = absl::StrSplit(line, ',');
    double end_ms = 0, lat_ns = 0;
    uint64_t bytes = 0;
    if (f.size() < 4 || !absl::SimpleAtod(absl::StripAsciiWhitespace(f[0]), &end_ms) ||
        !absl::SimpleAtod(absl::StripAsciiWhitespace(f[1]), &lat_ns) ||
        !absl::SimpleAtoi(absl::StripAsciiWhitespace(f[3]), &bytes)) {
      continue;
    }
    const double end = end_ms / 1e3;
    ios->Add(end - lat_ns / 1e9, end, bytes);
  }
  return true;
}

}  // namespace

std::optional<FioRun> RunFio(const FioPattern& p) {
  (void)MakeDirectories(p.dir);
  const bool uring = p.engine == "io_uring";
  const int jobs = uring ? 1 : p.depth;
  const size_t per_job = std::max<size_t>(1, p.files / static_cast<size_t>(jobs));
  if (uring && p.write) {
    std::fprintf(stderr, "fio: io_uring reads the psync jobs' files; it does not write\n");
    return std::nullopt;
  }
  // The log beside the files' directory, not in it (io_uring reads every file there).
  const std::string log = absl::StrCat(p.dir, "-lat");
  // psync: job j writes and reads its own files l2.<j>.<n>; io_uring: one job reads every
  // file the psync jobs wrote (--opendir), so both read the same files.
  const std::string files =
      uring ? absl::StrCat(" --opendir=", p.dir, " --iodepth=", p.depth, " --openfiles=", p.depth)
            : absl::StrCat(" --directory=", p.dir, " --nrfiles=", per_job,
                           " --filename_format='l2.$jobnum.$filenum' --openfiles=1");
  FioRun run;
  run.command = absl::StrCat(
      "fio --name=l2", files, " --bs=", p.file_bytes, " --filesize=", p.file_bytes,
      " --numjobs=", jobs, " --direct=1 --ioengine=", p.engine,
      " --file_service_type=sequential --rw=", p.write ? "write --create_on_open=1" : "read",
      " --group_reporting --minimal --write_lat_log=", log, " --log_avg_msec=0 --log_unix_epoch=1");
  const double cpu0 = CpuSeconds(/*children=*/true);
  const std::string output = Shell(run.command);
  run.cpu_seconds = CpuSeconds(/*children=*/true) - cpu0;
  run.reported_gbps = TerseGbps(output, p.write);
  for (int job = 1; job <= jobs; ++job) {
    const std::string path = absl::StrCat(log, "_lat.", job, ".log");
    if (!ReadLatLog(path, &run.ios)) {
      std::fprintf(stderr, "fio: no %s; fio said:\n%s\n", path.c_str(), output.c_str());
      return std::nullopt;
    }
    for (const char* kind : {"lat", "clat", "slat"}) {
      std::remove(absl::StrCat(log, "_", kind, ".", job, ".log").c_str());
    }
  }
  if (run.reported_gbps < 0 || run.ios.size() != per_job * static_cast<size_t>(jobs)) {
    std::fprintf(stderr, "fio: %zu I/Os logged, %zu expected; fio said:\n%s\n", run.ios.size(),
                 per_job * static_cast<size_t>(jobs), output.c_str());
    return std::nullopt;
  }
  return run;
}

}  // namespace kvstrata::bench
