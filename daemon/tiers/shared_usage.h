// SharedUsage: the bytes a shared (L3) tier's directory holds, in one small file that every
// daemon on the directory updates under flock: `<root>/.kvstrata-usage` (the ledger).
//
// Admission, not only trimming: a daemon takes room in the ledger *before* it writes (in
// grants of many blocks, so most writes do not touch the file), and so the directory never
// holds more than the ledger's limit however many daemons write at once. Each daemon also
// records the room it holds (its unused grant plus its writes in flight) as of its last
// update, so that a scan of the directory, which cannot see those bytes, can still count
// them. A full scan corrects the ledger (a daemon that died holding room, files deleted by
// hand, a torn ledger): bytes = what the scan found + what was reserved while it ran + what
// the daemons hold (see Reconcile).
//
// The file (text, docs/on-disk-format.md):
//   kvstrata-usage 1
//   bytes <u64>                    block-file bytes in the directory + room taken, unwritten
//   scanned <i64>                  unix ms of the last full scan (0: never)
//   holder <id> <u64> <i64>        a daemon, the room it holds, unix ms of that (0-64 lines)
// A file that does not parse (empty, torn, foreign) reads as {0 bytes, never scanned, no
// holders}: the next trim round scans at once and writes a good one. A holder line not
// updated for kHolderExpiry (a daemon that died) is dropped by the next Reconcile.
//
// Every call blocks on the filesystem (open, flock, read, write, fdatasync); none holds the
// lock after it returns. Thread-safe: the ledger keeps no state in memory.
#ifndef KVSTRATA_DAEMON_TIERS_SHARED_USAGE_H_
#define KVSTRATA_DAEMON_TIERS_SHARED_USAGE_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "daemon/tiers/block_file_system.h"

namespace kvstrata {

struct UsageHolder {
  std::string id;  // [A-Za-z0-9._-], 1-100 characters
  uint64_t bytes = 0;
  int64_t unix_ms = 0;
  bool operator==(const UsageHolder&) const = default;
};

struct UsageLedger {
  uint64_t bytes = 0;
  int64_t scanned_unix_ms = 0;
  std::vector<UsageHolder> holders;  // at most kMaxHolders, ids unique
  uint64_t held() const;             // the holders' bytes
  bool operator==(const UsageLedger&) const = default;
};

// The ledger's text; ParseUsageLedger(FormatUsageLedger(x)) == x. nullopt for anything
// that is not exactly that format (extra or missing lines, bad numbers, another version).
std::string FormatUsageLedger(const UsageLedger& ledger);
std::optional<UsageLedger> ParseUsageLedger(absl::string_view text);

class SharedUsage {
 public:
  static constexpr absl::string_view kFileName = ".kvstrata-usage";
  static constexpr size_t kMaxHolders = 64;  // more: the oldest lines are dropped
  static constexpr absl::Duration kHolderExpiry = absl::Hours(1);

  // `fs` is not owned and outlives this. `holder` names this daemon in the ledger
  // (MakeHolderId()); "" for a reader that holds nothing.
  SharedUsage(BlockFileSystem* fs, const std::string& root, std::string holder = "");
  const std::string& holder() const { return holder_; }
  // "<host>.<pid>.<random hex>", cut to the allowed characters.
  static std::string MakeHolderId();

  // Takes `want` bytes of room when the ledger then holds at most `limit`, and records
  // that this daemon holds `held` bytes (+ `want` when granted). The ledger after the call
  // (whether or not the room was granted) and whether it was.
  struct Grant {
    bool granted = false;
    UsageLedger after;
  };
  absl::StatusOr<Grant> Reserve(uint64_t want, uint64_t limit, uint64_t held, int64_t now_unix_ms);
  // Gives back `bytes` of room (an unused grant, a daemon's stop); never below 0; this
  // daemon now holds `held` (0: its line goes).
  absl::StatusOr<UsageLedger> Release(uint64_t bytes, uint64_t held, int64_t now_unix_ms);
  // Records that this daemon holds `held` (a refresh: its line does not expire).
  absl::StatusOr<UsageLedger> Hold(uint64_t held, int64_t now_unix_ms);
  absl::StatusOr<UsageLedger> Read();
  // After a full scan that started when the ledger read `at_start` and found `scanned`
  // bytes of block files (deletions made after the scan already taken out): bytes =
  // scanned + Unseen(at_start, ledger now); holder lines older than kHolderExpiry dropped;
  // scanned = `now_unix_ms`.
  absl::StatusOr<UsageLedger> Reconcile(const UsageLedger& at_start, uint64_t scanned,
                                        int64_t now_unix_ms);
  // What a scan between the ledgers `at_start` and `now` may not have seen: the room the
  // holders held at the start (unexpired lines: grants and writes in flight, which may
  // land after the scan passed their directory) + what was reserved since. An upper
  // bound: what of it the scan did see is counted twice until the next scan.
  static uint64_t Unseen(const UsageLedger& at_start, const UsageLedger& now, int64_t now_unix_ms);

  const std::string& path() const { return path_; }

 private:
  absl::StatusOr<UsageLedger> Update(const std::function<UsageLedger(const UsageLedger&)>& change);

  void SetHolder(UsageLedger& ledger, uint64_t held, int64_t now_unix_ms) const;

  BlockFileSystem* const fs_;
  const std::string path_;
  const std::string holder_;
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_TIERS_SHARED_USAGE_H_
