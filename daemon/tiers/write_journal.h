// WriteJournal: a shared (L3) tier's record of the block files each daemon wrote or used, in
// time buckets, so that a trim costs what it evicts instead of a walk of the whole tree
// (docs/tiers.md, "Trimming at scale").
//
//   <root>/.kvstrata-journal/<bucket>/<holder>.log
//
// <bucket> is the UTC minute a line was recorded in (unix minutes, 10 digits); <holder> is
// this daemon's ledger id (SharedUsage::MakeHolderId), so every daemon appends to files of
// its own only. A line is `<fingerprint> <hex key> <file bytes>\n` for a file written or used,
// `<fingerprint> <hex key> -\n` for one this daemon deleted (other daemons follow both:
// journal_follower.h). Record() and RecordRemoval() only buffer; Flush() appends the
// buffered lines, one write per bucket file (the tier's background thread calls it every
// l3.follow_interval_ms, every round when following is off, and at stop). A bucket is closed
// once its minute ended kClosedAfter ago (room for a daemon's flush delay and clock skew
// between nodes); the trimmer reads closed buckets oldest first (ForEachEntry) and drops each
// it has used up. A line that does not parse (torn, foreign) is skipped: a journal can only
// name block files, by a fingerprint and key the tier turns into a path under its root.
// Every file call goes through the tier's BlockFileSystem (AppendFile, ReadFileRange, ...)
// but Drop's rmdir of an emptied bucket.
// Thread-safe. Flush, Buckets, ClosedBuckets, LogsOf, ForEachEntry and Drop do file I/O and
// may block.
#ifndef KVSTRATA_DAEMON_TIERS_WRITE_JOURNAL_H_
#define KVSTRATA_DAEMON_TIERS_WRITE_JOURNAL_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "daemon/common/clock.h"
#include "daemon/common/mutex.h"
#include "daemon/tiers/block_file_system.h"

namespace kvstrata {

struct JournalEntry {
  std::string fingerprint;  // 32 lowercase hex
  std::string key;          // raw key bytes (1..32)
  uint64_t file_bytes = 0;  // 0 for a removal
  bool removed = false;     // the writer deleted the file (a `-` line)
};

class WriteJournal {
 public:
  static constexpr absl::string_view kDirName = ".kvstrata-journal";
  static constexpr absl::Duration kBucket = absl::Minutes(1);
  static constexpr absl::Duration kClosedAfter = absl::Minutes(2);
  // Lines buffered beyond this (flushes failing) are dropped; the tier's full scans still
  // find their files.
  static constexpr size_t kMaxBufferedLines = 1 << 20;

  // `fs` is not owned and outlives this; `holder` names this daemon's files. `clock` (the
  // tier's; nullptr = the system clock; not owned) times the dropped-lines warning.
  WriteJournal(BlockFileSystem* fs, std::string root, std::string holder, Clock* clock = nullptr);

  void Record(absl::Time when, absl::string_view fingerprint, absl::string_view key,
              uint64_t file_bytes);
  // This daemon deleted the block's file (a trim, an admin removal, a quarantine).
  void RecordRemoval(absl::Time when, absl::string_view fingerprint, absl::string_view key);
  // Appends the buffered lines; the number written. Lines whose write failed are dropped
  // (logged once a minute).
  size_t Flush();

  // Every bucket under the root (every daemon's), oldest first; the closed ones.
  std::vector<int64_t> Buckets() const;
  std::vector<int64_t> ClosedBuckets(absl::Time now) const;
  // The journal files of one bucket (every holder's, sorted): {holder, path}.
  std::vector<std::pair<std::string, std::string>> LogsOf(int64_t bucket) const;
  // Calls fn for each well-formed line naming a file written or used (removal lines are
  // skipped: they name nothing to trim) in the bucket's files until it answers false; false
  // then, true when every line was seen.
  bool ForEachEntry(int64_t bucket, const std::function<bool(const JournalEntry&)>& fn) const;
  // Removes the bucket's files and directory.
  void Drop(int64_t bucket) const;

  // The bucket `when` falls in, and the first instant after it.
  static int64_t BucketOf(absl::Time when);
  static absl::Time BucketEnd(int64_t bucket);
  // One line of a journal file (without its newline); false when it is not well formed.
  static bool ParseLine(absl::string_view line, JournalEntry* entry);
  // The line (without its newline) that ParseLine reads back as `entry`.
  static std::string FormatLine(const JournalEntry& entry);
  const std::string& holder() const { return holder_; }
  // The filesystem its files are reached through (not owned; JournalFollower reads with it).
  BlockFileSystem* files() const { return fs_; }

 private:
  std::string BucketDir(int64_t bucket) const;
  void Buffer(absl::Time when, const JournalEntry& entry);

  BlockFileSystem* const fs_;
  const std::string dir_;  // <root>/.kvstrata-journal
  const std::string holder_;
  Mutex flush_mu_;  // One Flush at a time: a holder's lines stay in order. Before mu_.
  Mutex mu_;
  std::map<int64_t, std::string> buffered_ ABSL_GUARDED_BY(mu_);  // bucket -> lines
  size_t buffered_lines_ ABSL_GUARDED_BY(mu_) = 0;
  size_t dropped_lines_ ABSL_GUARDED_BY(mu_) = 0;
  Clock* const clock_;
  absl::Time warned_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_TIERS_WRITE_JOURNAL_H_
