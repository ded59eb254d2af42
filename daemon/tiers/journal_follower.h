// JournalFollower: reads what the other daemons of a shared (L3) tier append to their write
// journals (write_journal.h), so that this daemon's index learns the blocks they write, use
// and delete without a stat(2) per block (docs/tiers.md, "Following the journals").
//
// Each Poll reads every other holder's journal file from where the previous Poll stopped,
// complete lines only: a line still being appended (no newline yet) is read by a later Poll,
// once whole. Buckets are read oldest first; a bucket that had closed (kClosedAfter) before a
// Poll read it to its end is not listed again. Buckets that ended more than `lookback` before
// the first Poll are skipped (their lines are too old to tell what is there now). The lines
// of this daemon's own holder are skipped.
// Not thread-safe: one caller at a time (the tier's background thread; Open before it
// starts). Poll does file I/O and blocks up to its deadline (plus one file read).
#ifndef KVSTRATA_DAEMON_TIERS_JOURNAL_FOLLOWER_H_
#define KVSTRATA_DAEMON_TIERS_JOURNAL_FOLLOWER_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "daemon/tiers/write_journal.h"

namespace kvstrata {

class JournalFollower {
 public:
  // A line read by Poll: the entry, the holder whose journal it is in, and its bucket.
  using LineFn = std::function<void(const JournalEntry&, absl::string_view holder, int64_t bucket)>;

  static constexpr size_t kMaxLineBytes = 4096;

  // `journal` (this daemon's own: its root and holder) is not owned and outlives this.
  JournalFollower(const WriteJournal* journal, absl::Duration lookback);

  // Reads the lines appended since the last Poll, calling fn for each well-formed one, for
  // at most `budget` (a bound on this call, on the monotonic clock; what is left is read by
  // the next Poll). `now` (the tier's Clock) says which buckets are closed. The number of
  // lines read. A line longer than any a journal writes (kMaxLineBytes) without its newline
  // is skipped.
  size_t Poll(absl::Time now, absl::Duration budget, const LineFn& fn);

 private:
  using Deadline = std::chrono::steady_clock::time_point;
  // Reads `path` from `*offset` to its last newline, advancing `*offset`; false when it
  // could not be read whole before `deadline`.
  bool ReadNewLines(const std::string& path, absl::string_view holder, uint64_t* offset,
                    int64_t bucket, Deadline deadline, const LineFn& fn, size_t* lines);

  const WriteJournal* const journal_;
  const absl::Duration lookback_;
  bool started_ = false;
  int64_t oldest_ = 0;                                          // buckets before this are not read
  std::map<int64_t, std::map<std::string, uint64_t>> offsets_;  // bucket -> holder -> bytes read
  std::set<int64_t> done_;  // closed buckets read to their end after they closed
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_TIERS_JOURNAL_FOLLOWER_H_
