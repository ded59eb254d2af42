// ObjectJournal: an object tier's record of the blocks each daemon wrote and deleted, kept as
// objects in the bucket, so that every daemon's index learns the other daemons' blocks
// without a HEAD per block -- the bucket's counterpart of the shared-file tier's write
// journals and their follower (write_journal.h, journal_follower.h; docs/tiers.md, "The
// object tier", and docs/on-disk-format.md).
//
//   <control>/journal/<unix ms, 13 digits>-<holder>
//
// Each daemon ("holder", SharedUsage::MakeHolderId()) buffers a line per block it wrote or
// deleted (WriteJournal's line format: `<fingerprint> <hex key> <object bytes>` or
// `<fingerprint> <hex key> -`) and Flush() PUTs the buffered lines as one new object named by
// the flush's time, so no two daemons ever write one object. Follow() lists the journal
// objects named from kLag before the newest one it saw (ListObjectsV2 with start-after: the
// window covers PUTs that finished after a later-named one was listed, and clock skew
// between nodes up to kLag), GETs the other holders' ones it has not read, oldest name first,
// and calls fn for each well-formed line; a line that does not parse is skipped (a journal
// can only name blocks, by a fingerprint and key the tier turns into an object name). Its
// first call reads the last `lookback`. A daemon deletes its own journal objects once they
// are `lookback` old (DropOwnBefore); the trimmer deletes any older than twice that (a dead
// daemon's).
//
// Thread-safe: Record and RecordRemoval only buffer (any thread); Flush, Follow and
// DropOwnBefore block on the bucket, one call of each at a time (the tier's follower thread,
// and Flush at a clear and at stop).
#ifndef KVSTRATA_DAEMON_TIERS_OBJECT_OBJECT_JOURNAL_H_
#define KVSTRATA_DAEMON_TIERS_OBJECT_OBJECT_JOURNAL_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "daemon/common/mutex.h"
#include "daemon/tiers/object/s3_client.h"
#include "daemon/tiers/write_journal.h"

namespace kvstrata {

class ObjectJournal {
 public:
  using LineFn = std::function<void(const JournalEntry&)>;

  static constexpr absl::Duration kLag = absl::Seconds(30);
  // Lines buffered beyond this (flushes failing) are dropped: those blocks are probed.
  static constexpr size_t kMaxBufferedLines = 1 << 20;
  // Journal objects read per batch of GETs (a Follow stops between batches at its budget).
  static constexpr size_t kReadBatch = 64;

  // `control`: the prefix of the tier's own objects ("<prefix>/.kvstrata"). `s3` is not
  // owned and outlives this.
  ObjectJournal(S3Client* s3, std::string control, std::string holder, absl::Duration lookback);

  void Record(absl::string_view fingerprint, absl::string_view key, uint64_t object_bytes);
  void RecordRemoval(absl::string_view fingerprint, absl::string_view key);

  // PUTs the buffered lines as one object named by `now` (nothing without lines). On failure
  // the lines stay buffered for the next Flush (up to kMaxBufferedLines) and the error is
  // returned. The lines written.
  absl::StatusOr<size_t> Flush(absl::Time now);
  // Deletes this daemon's journal objects named before `cutoff`.
  void DropOwnBefore(absl::Time cutoff);
  // Deletes the journal objects among `listed` (a listing of the tier's prefix: the
  // trimmer's) last modified before `cutoff`, every holder's (a dead daemon's too).
  void DropListedBefore(const std::vector<S3Object>& listed, absl::Time cutoff);
  // Reads the other holders' journal objects that appeared since the last Follow (see the
  // top), calling fn for each line, for at most `budget` (checked between batches of GETs;
  // the objects left are read by the next Follow). The lines read, or the listing's error.
  absl::StatusOr<size_t> Follow(absl::Time now, absl::Duration budget, const LineFn& fn);

  // A journal object's name (the part after "<control>/journal/") into its time and holder;
  // false when it is not one.
  static bool ParseName(absl::string_view name, int64_t* unix_ms, std::string* holder);
  // The lines of a journal object: fn for each well-formed one; the number of those.
  static size_t ParseText(absl::string_view text, const LineFn& fn);
  std::string Dir() const { return dir_; }

 private:
  std::string NameAt(int64_t unix_ms) const;
  // Buffers one entry's line for the next Flush, or counts it dropped past kMaxBufferedLines.
  void Buffer(const JournalEntry& entry);
  void Delete(const std::vector<std::string>& names);

  S3Client* const s3_;
  const std::string dir_;  // "<control>/journal/"
  const std::string holder_;
  const absl::Duration lookback_;

  Mutex mu_;
  std::string buffered_ ABSL_GUARDED_BY(mu_);
  size_t buffered_lines_ ABSL_GUARDED_BY(mu_) = 0;
  size_t dropped_lines_ ABSL_GUARDED_BY(mu_) = 0;

  Mutex flush_mu_;  // one Flush at a time; own_ by it
  std::deque<std::pair<int64_t, std::string>> own_ ABSL_GUARDED_BY(flush_mu_);
  int64_t last_name_ms_ ABSL_GUARDED_BY(flush_mu_) = 0;

  Mutex follow_mu_;  // one Follow at a time; the follower's state by it
  int64_t cursor_ms_ ABSL_GUARDED_BY(follow_mu_) = -1;  // the newest name seen; -1: none yet
  std::map<std::string, int64_t> read_ ABSL_GUARDED_BY(follow_mu_);  // name -> its ms
  std::set<std::string> pending_ ABSL_GUARDED_BY(follow_mu_);        // listed, not read yet
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_TIERS_OBJECT_OBJECT_JOURNAL_H_
