// SharedFileTier and the write journals (write_journal.h): the trim, whose cost
// follows what it deletes, not the size of the tree, and the following of the other daemons'
// journals into the index (journal_follower.h).
#include <algorithm>
#include <string>
#include <utility>

#include "daemon/tiers/shared_file_tier.h"

namespace kvstrata {
namespace {

// A file a bucket names is taken only if its mtime is not past the bucket's end by more
// than this: a later write or recorded use names it in a later bucket, and this much is
// left for the clocks of the nodes (mtimes of writes come from the file server's).
constexpr absl::Duration kMtimeSlack = WriteJournal::kBucket;
// The index learns at most this many blocks from the journals (others' deletions still
// leave it); past that, probes find the rest.
constexpr size_t kMaxFollowedIndex = size_t{1} << 22;

// What one FollowJournals pass read about one block: its last line in each journal, and
// whether two journals disagree (a write and a deletion of two daemons within one pass,
// whose order the lines cannot tell: the block is probed again instead).
struct Followed {
  enum class Verdict { kPresent, kGone, kConflict };
  Verdict verdict = Verdict::kPresent;
  std::string holder;  // of the last line
  uint64_t file_bytes = 0;
  int64_t bucket = 0;  // of the last line
};

}  // namespace

bool SharedFileTier::TrimFromJournal(size_t* deleted) {
  *deleted = 0;
  const std::vector<int64_t> buckets = journal_->ClosedBuckets(clock_->Now());
  if (buckets.empty()) return false;
  const absl::StatusOr<UsageLedger> ledger = usage_->Read();
  if (!ledger.ok()) return false;
  uint64_t capacity;
  {
    MutexLock lock(&mu_);
    capacity = EffectiveCapacityLocked();
  }
  uint64_t usage = ledger->bytes;
  if (!OverHighMark(usage, capacity)) return true;
  const double low = options_.low_watermark * static_cast<double>(capacity);
  uint64_t deleted_bytes = 0;
  for (int64_t bucket : buckets) {
    const absl::Time newest = WriteJournal::BucketEnd(bucket) + kMtimeSlack;
    const bool used_up = journal_->ForEachEntry(bucket, [&](const JournalEntry& e) {
      if (static_cast<double>(usage) <= low || stopping_) return false;
      const std::string path = PathOf(e.fingerprint, e.key);
      std::optional<FileInfo> info = path.empty() ? std::nullopt : fs_->Stat(path);
      // Gone already, or written or used since: a later bucket names it.
      if (!info.has_value() || !info->regular || info->modified > newest) return true;
      if (!fs_->Remove(path)) return true;
      Removed(e.fingerprint, e.key);
      usage -= std::min(usage, info->size);
      deleted_bytes += info->size;
      ++*deleted;
      MutexLock lock(&mu_);
      ++counters_.evictions;
      absl::StatusOr<BlockKey> k = KeyOfLocked(e.fingerprint, e.key);
      if (k.ok()) EraseLocked(*k, RemovalCause::kEvicted);
      return true;
    });
    if (!used_up) break;
    journal_->Drop(bucket);
  }
  absl::StatusOr<UsageLedger> after = usage_->Release(deleted_bytes, HeldNow(), NowMillis());
  MutexLock lock(&mu_);
  if (after.ok()) shared_used_bytes_ = after->bytes;
  return !OverHighMark(usage, capacity);
}

void SharedFileTier::DropSpentBuckets(const absl::flat_hash_map<std::string, absl::Time>& files) {
  for (int64_t bucket : journal_->ClosedBuckets(clock_->Now())) {
    if (stopping_) return;
    const absl::Time newest = WriteJournal::BucketEnd(bucket) + kMtimeSlack;
    bool spent = journal_->ForEachEntry(bucket, [&](const JournalEntry& e) {
      auto it = files.find(PathOf(e.fingerprint, e.key));
      return it == files.end() || it->second > newest;  // false: a file a trim could take
    });
    if (spent) journal_->Drop(bucket);
  }
}

size_t SharedFileTier::FollowJournals(absl::Duration budget) {
  if (follower_ == nullptr) return 0;
  using Verdict = Followed::Verdict;
  absl::flat_hash_map<std::pair<std::string, std::string>, Followed> seen;
  auto note = [&](const JournalEntry& e, absl::string_view holder, int64_t bucket) {
    auto [it, fresh] = seen.try_emplace(std::make_pair(e.fingerprint, e.key));
    Followed& f = it->second;
    const Verdict verdict = e.removed ? Verdict::kGone : Verdict::kPresent;
    if (!fresh && f.verdict == Verdict::kConflict) return;
    if (!fresh && f.holder != holder && f.verdict != verdict) {
      f.verdict = Verdict::kConflict;
      return;
    }
    f = Followed{verdict, std::string(holder), e.file_bytes, bucket};
  };
  // Held to the end: two passes apply their lines in the order they read them.
  MutexLock following(&follow_mu_);
  const absl::Time now = clock_->Now();
  const size_t lines = follower_->Poll(now, budget, note);
  MutexLock lock(&mu_);
  for (const auto& [block, f] : seen) {
    absl::StatusOr<BlockKey> k = KeyOfLocked(block.first, block.second);
    if (!k.ok()) continue;
    auto it = index_.find(*k);
    // A line names only its minute: a write or use happened at the minute's start at the
    // earliest (so a followed entry is kStale, probed by a lookup, never trusted as just
    // seen), a removal at min(now, the minute's end) at the latest (what this daemon saw
    // of the file later wins).
    const absl::Time latest = std::min(now, WriteJournal::BucketEnd(f.bucket));
    const absl::Time earliest = WriteJournal::BucketEnd(f.bucket) - WriteJournal::kBucket;
    switch (f.verdict) {
      case Verdict::kPresent:
        // A removal this daemon learned of may be newer than the line: the block comes
        // back only through this daemon's own probe, read or write.
        if (TombstonedLocked(*k, now)) break;
        absent_until_.erase(*k);
        if (it != index_.end()) {
          it->second.verified = std::max(it->second.verified, earliest);
        } else if (now - earliest <= options_.followed_presence_ttl &&
                   index_.size() < kMaxFollowedIndex) {
          InsertLocked(*k, f.file_bytes);
          index_.find(*k)->second.verified = earliest;
        }
        break;
      case Verdict::kGone:
        if (it == index_.end() || it->second.verified < latest) {
          EraseLocked(*k, RemovalCause::kEvicted);
        }
        break;
      case Verdict::kConflict:
        if (it != index_.end()) it->second.verified = absl::InfinitePast();
        break;
    }
  }
  // The others' deletions reach the index within a few ticks while this keeps up.
  follow_ok_until_ = now + 3 * options_.follow_interval + absl::Seconds(1);
  counters_.followed_lines += lines;
  return lines;
}

}  // namespace kvstrata
