// SharedFileTier: the "shared-file" kind (the default l3): a FileTier over a directory on a
// shared filesystem that every node's daemon writes and deletes. Its index only caches what
// this daemon saw (its writes, reads, probes, and the other daemons' write journals it
// follows); an entry counts as present for presence_ttl since the file was last seen, then
// as kStale; a removal it learns of is remembered for kTombstoneTtl. Capacity is held
// across daemons by the usage ledger (shared_usage.h: a write takes its room there first),
// and whichever daemon holds the evict lock trims the oldest-accessed files from the
// journals' closed buckets (write_journal.h), or by a scan when those fall short. See
// file_tier.h for the store both kinds share and the full story. Thread-safe; lock order:
// follow_mu_, then mu_.
#ifndef KVSTRATA_DAEMON_TIERS_SHARED_FILE_TIER_H_
#define KVSTRATA_DAEMON_TIERS_SHARED_FILE_TIER_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "daemon/tiers/file_tier.h"
#include "daemon/tiers/journal_follower.h"
#include "daemon/tiers/shared_usage.h"
#include "daemon/tiers/write_journal.h"

namespace kvstrata {

class SharedFileTier final : public FileTier {
 public:
  // Built by FileTier::Open (options.shared true), which starts it.
  explicit SharedFileTier(FileTierOptions options);
  ~SharedFileTier() override { Stop(); }

  size_t EnforceSharedCapacity() override { return TrimShared(/*correct_ledger=*/true); }
  size_t FollowJournals(absl::Duration budget) override;  // file_tier_journal.cc

 protected:
  void Background() override { EvictionLoop(); }
  void Started() override;
  void Stopped() override;
  bool IndexComplete() const override { return false; }
  Presence IndexedPresenceLocked(const FileMeta& meta) const override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::optional<FileInfo> StatForProbe(const std::string& path) override {
    return fs_->StatUncached(path);
  }
  void IndexedLocked(const BlockKey& key) override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemovalLearnedLocked(const BlockKey& key, absl::Time when) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReadHit(const BlockKey& key, const std::string& path) override;
  void Written(absl::string_view fingerprint, absl::string_view key, uint64_t file_bytes) override;
  void Removed(absl::string_view fingerprint, absl::string_view key) override;
  void RemovalsDone() override { journal_->Flush(); }
  bool StillThere(const TierNamespace& ns, absl::string_view key) override {
    return ProbeImpl(ns, key);
  }
  absl::StatusOr<bool> AdmitWrite(uint64_t file_bytes) override;
  void EndAdmittedLocked(uint64_t file_bytes, bool written) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool EvictForLocked(uint64_t, std::vector<std::string>*) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return true;  // Trimmed by the eviction loop.
  }
  uint64_t UsedBytesLocked() const override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return shared_used_bytes_;
  }

 private:
  // The background loop (file_tier_scan.cc): every follow_interval the journal goes out and
  // the others' come in; every round (or when a write asks) the ledger says whether to trim.
  void EvictionLoop();
  void RequestTrim();
  // One trim pass (the lock, a scan, deletions down to the low mark). correct_ledger: the
  // ledger becomes what the scan found (SharedUsage::Reconcile); else the deletions are
  // taken off it and the usage is never taken below it (a listing may lag other nodes).
  size_t TrimShared(bool correct_ledger);
  // The trim from the journal's closed buckets, oldest first (file_tier_journal.cc), under
  // the evict lock: deletes down to the low mark the files a bucket names that were not
  // written or used since, and counts them in `deleted`. False when it could not bring the
  // usage under the high mark (no closed bucket, no ledger, or the buckets ran out): the
  // caller then scans the tree.
  bool TrimFromJournal(size_t* deleted);
  // After a full scan that found `files` (path -> mtime): drops the closed buckets that
  // name no file a trim could take (every one gone, or written or used since).
  void DropSpentBuckets(const absl::flat_hash_map<std::string, absl::Time>& files);
  // A removal of the block was learned within kTombstoneTtl.
  bool TombstonedLocked(const BlockKey& key, absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t HeldNow() const {
    MutexLock lock(&mu_);
    return HeldLocked();
  }
  uint64_t HeldLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return grant_left_ + in_flight_bytes_;
  }

  const std::unique_ptr<SharedUsage> usage_;
  const std::unique_ptr<WriteJournal> journal_;
  // One FollowJournals at a time (the background thread, Open, tests); taken before mu_.
  Mutex follow_mu_;
  // With follow_interval > 0.
  const std::unique_ptr<JournalFollower> follower_ ABSL_PT_GUARDED_BY(follow_mu_);
  absl::Time follow_ok_until_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::flat_hash_map<BlockKey, absl::Time> removed_at_ ABSL_GUARDED_BY(mu_);  // tombstones
  uint64_t grant_left_ ABSL_GUARDED_BY(mu_) = 0;         // room taken in the ledger, unused
  uint64_t in_flight_bytes_ ABSL_GUARDED_BY(mu_) = 0;    // room taken by writes under way
  uint64_t shared_used_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // the ledger, as last read
  absl::Time ledger_warned_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool trim_requested_ = false;  // by wake_mu_: a write passed the high mark
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_TIERS_SHARED_FILE_TIER_H_
