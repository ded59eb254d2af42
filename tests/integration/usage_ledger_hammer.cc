// usage_ledger_hammer: one process's share of a lost-update test of the L3 usage ledger
// (daemon/tiers/shared_usage.h) on a shared filesystem: --updates Reserve calls of --want
// bytes each under a limit none of them reaches, through the daemon's own SharedUsage on
// the POSIX BlockFileSystem. Run one per mount of a volume, at once, on one directory; the
// ledger's bytes at the end must be the sum of every process's granted bytes
// (test_l3_gluster.py, test_usage_ledger_loses_no_update). Each update also checks that the
// ledger it left does not hold fewer bytes than the one before it did (only reservations
// are made, so a ledger that went backwards was read stale).
//
// Usage: usage_ledger_hammer --root=DIR --holder=ID [--updates=200] [--want=4096] [--trace]
// Prints one line: "granted <n> bytes <n> backwards <n> errors <n> last <ledger bytes>";
// with --trace also one line per update on stderr: "<unix ns> <ledger bytes after it>"
// (merged across processes by time, the reads of a lost update show up twice).
// Exits 0 when every call returned OK.
#include <cstdint>
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/time/clock.h"
#include "daemon/tiers/block_file_system.h"
#include "daemon/tiers/shared_usage.h"

ABSL_FLAG(std::string, root, "", "the shared directory holding .kvstrata-usage");
ABSL_FLAG(std::string, holder, "", "this process's holder id in the ledger");
ABSL_FLAG(int, updates, 200, "Reserve calls to make");
ABSL_FLAG(uint64_t, want, 4096, "bytes each Reserve takes");
ABSL_FLAG(bool, trace, false,
          "print each update to stderr: unix ns at its end, ledger bytes after it");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string root = absl::GetFlag(FLAGS_root);
  if (root.empty() || absl::GetFlag(FLAGS_want) == 0) {
    std::fprintf(stderr, "usage_ledger_hammer: --root and a --want of 1 or more are required\n");
    return 2;
  }
  kvstrata::SharedUsage usage(kvstrata::BlockFileSystem::Default(), root,
                              absl::GetFlag(FLAGS_holder));
  const uint64_t want = absl::GetFlag(FLAGS_want);
  constexpr uint64_t kLimit = uint64_t{1} << 62;
  uint64_t granted = 0, backwards = 0, errors = 0, last = 0;
  for (int i = 0; i < absl::GetFlag(FLAGS_updates); ++i) {
    absl::StatusOr<kvstrata::SharedUsage::Grant> grant = usage.Reserve(
        want, kLimit, want * static_cast<uint64_t>(i % 4), absl::ToUnixMillis(absl::Now()));
    if (!grant.ok()) {
      std::fprintf(stderr, "usage_ledger_hammer: %s\n", grant.status().ToString().c_str());
      ++errors;
      continue;
    }
    if (absl::GetFlag(FLAGS_trace)) {
      std::fprintf(stderr, "%lld %llu\n", static_cast<long long>(absl::ToUnixNanos(absl::Now())),
                   static_cast<unsigned long long>(grant->after.bytes));
    }
    if (grant->granted) granted += want;
    if (grant->after.bytes < last) ++backwards;
    last = grant->after.bytes;
  }
  std::printf("granted %llu bytes %llu backwards %llu errors %llu last %llu\n",
              static_cast<unsigned long long>(granted / want),
              static_cast<unsigned long long>(granted), static_cast<unsigned long long>(backwards),
              static_cast<unsigned long long>(errors), static_cast<unsigned long long>(last));
  return errors == 0 ? 0 : 1;
}
