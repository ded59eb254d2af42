// FileTier's trim of a shared tier from the write journals (write_journal.h): the cost of a
// pass follows what it deletes, not the size of the tree.
#include <algorithm>

#include "daemon/tiers/file_tier.h"

namespace kvstrata {
namespace {

// A file a bucket names is taken only if its mtime is not past the bucket's end by more
// than this: a later write or recorded use names it in a later bucket, and this much is
// left for the clocks of the nodes (mtimes of writes come from the file server's).
constexpr absl::Duration kMtimeSlack = WriteJournal::kBucket;

}  // namespace

bool FileTier::TrimFromJournal(size_t* deleted) {
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

void FileTier::DropSpentBuckets(const absl::flat_hash_map<std::string, absl::Time>& files) {
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

}  // namespace kvstrata
