// FioRunner: runs fio(1) on a directory with the L2 tier's access pattern (one O_DIRECT
// I/O of the whole file per block file, files of one size) and returns every I/O's
// (start, end) from fio's own per-I/O latency log, so that fio's figures and the tier's are
// computed the same way (io_timeline.h). Blocks while fio runs; one call at a time per
// directory. Used by l2_fio.cc.
#ifndef KVSTRATA_BENCH_TIERS_FIO_RUNNER_H_
#define KVSTRATA_BENCH_TIERS_FIO_RUNNER_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "bench/tiers/io_timeline.h"

namespace kvstrata::bench {

struct FioPattern {
  std::string dir;          // fio's files go here (created; the caller removes it)
  uint64_t file_bytes = 0;  // one file = one I/O (--bs = --filesize)
  size_t files = 0;         // in all, split evenly over the jobs
  // "psync" with `depth` jobs (threads each with one I/O in flight: the IoPool's pattern;
  // job j's files are l2.<j>.<n>), or "io_uring" with one job and `depth` I/Os in flight,
  // reading every file in `dir` (those a psync write made: read only).
  std::string engine = "psync";
  int depth = 1;
  bool write = false;  // write creates the files (--create_on_open); read needs them there
};

struct FioRun {
  IoTimeline ios;
  double reported_gbps = 0;  // fio's own aggregate bandwidth (its runtime, opens included)
  double cpu_seconds = 0;    // user + system CPU of the fio process (its set-up included)
  std::string command;
};

// The version line of `fio --version`, or nullopt when fio is not on PATH.
std::optional<std::string> FioVersion();

// Runs fio once. nullopt (with the reason on stderr) when fio failed or its log is missing.
std::optional<FioRun> RunFio(const FioPattern& pattern);

// Runs a shell command; returns its stdout and stderr.
std::string Shell(const std::string& command);

// User + system CPU seconds of this process (RUSAGE_SELF) or of its children waited for
// (RUSAGE_CHILDREN), so far.
double CpuSeconds(bool children);

}  // namespace kvstrata::bench

#endif  // KVSTRATA_BENCH_TIERS_FIO_RUNNER_H_
