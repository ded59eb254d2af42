// FileTier: the block-file store both file kinds share -- one directory of block files
// (block_path.h layout, block_file_format.h files, docs/on-disk-format.md), their index,
// reads, writes, capacity and faults -- and the two kinds over it, split along `shared`:
// LocalFileTier ("local-file", local_file_tier.h: a directory only this daemon writes, the
// default l2) and SharedFileTier ("shared-file", shared_file_tier.h: a directory every
// node's daemon writes, the default l3). FileTier::Open builds the kind its options name;
// what differs between the kinds is a protected hook here, each kind's own in its header.
//
// What is where: an in-memory index of the files this tier knows, filled by its own
// writes, by a background warm-up scan of the tree after start (local tier), and by probes
// (a stat of the block's path) for keys it does not know. A local tier is the only writer
// of its directory, so once warm its index is complete; a shared tier's directory is
// written and evicted by every node's daemon, so its index only caches positive answers,
// absent files are remembered for `negative_cache_ttl`, and a read may still miss. A shared
// tier also follows the other daemons' write journals (journal_follower.h) every
// `follow_interval`, and once at Open: the blocks they write or use enter its index and the
// ones they delete leave it, without a stat. A shared tier's entry counts as present
// (kPresent) for `presence_ttl` (100 ms) since this daemon last saw the file (its write, a
// read, a probe); past that it is kStale: a lookup probes it again (StatUncached: past the
// client's caches, which can hide another node's deletion, or an operator's rm, for a
// second or more), and counts it unprobed only where that probe does not answer in time,
// while the entry is younger than `followed_presence_ttl` (the following keeps up) or
// `stale_presence_ttl` (it does not). A removal this daemon learns of (a failed read or
// probe, its own removal, another daemon's removal line) is remembered for kTombstoneTtl:
// no journal line of another daemon puts that block back in the index meanwhile (the line
// may be older than the removal); only this daemon's own write, read or probe does.
//
// Capacity: a local tier evicts with the configured policy (lru/arc/s3fifo) before a write
// would pass the high watermark, down to the low one. A shared tier admits a write only
// with room taken in the directory's usage ledger (shared_usage.h: every daemon's writes
// count, so the directory stays within the capacity however many write at once; a write
// that does not fit is refused and counted). Whichever daemon holds
// `<root>/.kvstrata-evict.lock` (flock) trims: when the ledger passes the high watermark it
// deletes files with the oldest recorded access (mtime, which every daemon sets on a hit at
// most once per `access_record_interval`) down to the low one, so two daemons never evict
// at once. It finds them in the daemons' write journals (write_journal.h: the files each
// wrote or used, by the minute), oldest minute first, at a cost that follows what it
// deletes; when the journals cannot bring the usage under the high mark (too young, or
// written by daemons that keep none) it scans the tree. At least every
// `shared_audit_interval` a full scan also corrects the ledger and drops spent journal
// buckets. A ledger that cannot be used (no flock on that filesystem) is logged, and the
// tier falls back to trimming after the fact.
//
// Faults: ENOSPC/EDQUOT/EFBIG shrink the tier to what it holds (kDegraded); a shrunk tier
// looks at the disk's free space (statvfs) at most every `space_recheck_interval` when it
// makes room and grows back to what it holds plus 90% of the free space, up to its
// configured capacity (then kOk again), so freeing space needs no restart; other write
// errors make it read-only for `read_only_cooldown`; a file that fails verification is
// quarantined; every fault is a miss or a dropped write, never an error to the engine.
// Thread-safe; file I/O runs on the caller's thread, never under the index lock.
#ifndef KVSTRATA_DAEMON_TIERS_FILE_TIER_H_
#define KVSTRATA_DAEMON_TIERS_FILE_TIER_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "daemon/common/clock.h"
#include "daemon/common/mutex.h"
#include "daemon/common/tier.h"
#include "daemon/index/block_entry.h"
#include "daemon/index/block_key.h"
#include "daemon/namespaces/namespace_ids.h"
#include "daemon/namespaces/namespace_registry.h"
#include "daemon/namespaces/namespace_spec.h"
#include "daemon/tiers/block_file_io.h"
#include "daemon/tiers/block_file_system.h"
#include "daemon/tiers/block_tier.h"

namespace kvstrata {

struct FileTierOptions {
  std::string name;       // the tier's label: logs
  Tier tier = Tier::kL2;  // its id in the daemon's tier table
  std::string root;
  uint64_t capacity_bytes = 0;
  std::string eviction_policy = "lru";  // local tier only
  double high_watermark = 0.95;
  double low_watermark = 0.85;
  bool shared = false;  // L3 semantics (see above)
  FsyncPolicy fsync = FsyncPolicy::kNone;
  absl::Duration negative_cache_ttl = absl::Seconds(2);
  // Shared tier: another daemon may delete an indexed block at any time (its trim, a
  // clear, an rm), so an index entry not seen on disk for this long is kStale (a lookup
  // probes it again).
  absl::Duration presence_ttl = absl::Milliseconds(100);
  // Shared tier: how long a kStale entry still counts where its probe does not answer in
  // time, without following (or while it lags).
  absl::Duration stale_presence_ttl = absl::Seconds(10);
  // Shared tier: how often this daemon appends its journal lines and reads the others' (0:
  // it never reads them and appends every eviction round), and how long a kStale entry
  // counts unprobed while it does.
  absl::Duration follow_interval = absl::Seconds(1);
  absl::Duration followed_presence_ttl = absl::Minutes(10);
  absl::Duration access_record_interval = absl::Seconds(60);
  absl::Duration shared_eviction_interval = absl::Seconds(10);
  absl::Duration shared_audit_interval = absl::Hours(1);  // full scan at least this often
  absl::Duration read_only_cooldown = absl::Seconds(30);
  absl::Duration space_recheck_interval = absl::Seconds(1);  // while shrunk by a full disk
  // Called (with the tier's lock held: be quick, do not call back) when a block this tier
  // wrote becomes findable (stored = true) and when such a block leaves it (stored = false,
  // with why). Blocks found by the warm-up scan or by probes are not announced, and nor is
  // their removal, so every announced store has exactly one removal.
  // The namespace is named by its id in `namespace_ids` (the daemon's, as L1 names it).
  std::function<void(NamespaceId ns, absl::string_view key, bool stored, RemovalCause cause)>
      observer;
  // Every filesystem call goes here (nullptr = BlockFileSystem::Default(), POSIX); tests
  // pass a wrapper that injects faults. Not owned; outlives the tier.
  BlockFileSystem* files = nullptr;
  // The time source of the index's ages, cooldowns and rechecks (nullptr = the system
  // clock; file mtimes are the filesystem's own). Not owned; outlives the tier.
  Clock* clock = nullptr;
  // The daemon's namespace ids (its NamespaceRegistry): the index keys blocks by the same
  // (NamespaceId, key) as L1, and a namespace found on disk first gets its id there. Not
  // owned; outlives the tier. nullptr = an id space of the tier's own (a tier used alone:
  // tests, tools), where a TierNamespace's id is ignored and its fingerprint decides.
  NamespaceIds* namespace_ids = nullptr;
};

class FileTier : public BlockTier {
 public:
  // How long a shared tier remembers a removal against other daemons' journal lines (a
  // bucket's minute and the two until it closes): a line is appended within a flush
  // interval of being recorded and read within one of being appended, far sooner.
  static constexpr absl::Duration kTombstoneTtl = absl::Minutes(3);

  // Creates the root if needed and builds the kind `options.shared` names (SharedFileTier
  // or LocalFileTier), then starts its background thread (warm-up scan for a local tier,
  // the eviction loop for a shared one). FAILED_PRECONDITION when the root cannot be
  // created or is not a directory.
  static absl::StatusOr<std::unique_ptr<FileTier>> Open(FileTierOptions options);
  FileTier(const FileTier&) = delete;
  FileTier& operator=(const FileTier&) = delete;
  ~FileTier() override;  // Stop()s first.

  // BlockTier (block_tier.h): the front's calls, checked and counted there, reach the
  // Impls below.
  Tier level() const override { return options_.tier; }
  std::string label() const override { return options_.name; }
  // Runs one shared-tier eviction pass now if this daemon gets the lock (tests, drain),
  // and corrects the usage ledger from the scan. Returns the files deleted. 0 for a local
  // tier.
  virtual size_t EnforceSharedCapacity() { return 0; }
  // Shared tier with follow_interval > 0: reads the lines the other daemons appended to
  // their journals since the last call, for at most `budget`, into the index (the
  // background thread does this every follow_interval; tests call it). The lines read;
  // 0 for a local tier.
  virtual size_t FollowJournals(absl::Duration /*budget*/) { return 0; }
  // Blocks until the warm-up scan is done or `timeout` passes; true when done (a shared
  // tier has none: at once).
  bool WaitWarm(absl::Duration timeout) const;

  bool shared() const override { return options_.shared; }
  // Ends the background thread (a shared tier's trim stops between two files: what it
  // already deleted is announced, nothing after) and joins it, and gives a shared tier's
  // unused room back to the usage ledger. After this no observer notice comes from a
  // thread of the tier's own. Idempotent; writes after it are not expected.
  void Stop() override;
  const FileTierOptions& options() const { return options_; }

 protected:
  struct FileMeta {
    uint64_t file_bytes = 0;
    absl::Time recorded_access;  // shared tier: when mtime was last set by us
    uint32_t readers = 0;        // local tier: not evicted while > 0
    bool announced = false;      // written by this tier: its removal is announced too
    absl::Time verified;         // last seen on disk (written, scanned or probed)
  };

  explicit FileTier(FileTierOptions options);

  // BlockTier, for files:
  // What the index says, without I/O. kUnknown: only a Probe can tell; kStale (shared
  // tier): indexed, not seen within presence_ttl.
  Presence CachedImpl(const TierNamespace& ns, absl::string_view key) const override;
  // stat(2)s the block's file (StatForProbe) and records the answer (a file gone since it
  // was indexed leaves the index).
  bool ProbeImpl(const TierNamespace& ns, absl::string_view key) override;
  // Reads and verifies the block file into `dest`.
  bool ReadImpl(const TierNamespace& ns, absl::string_view key, absl::Span<char> dest) override;
  // Writes the block (atomically; see block_file_io.h), making room first. A refusal or
  // failure is counted and returned (the caller drops the write).
  absl::StatusOr<WriteOutcome> WriteImpl(const TierNamespace& ns, absl::string_view key,
                                         absl::string_view payload) override;
  // Deletes the block's file.
  bool RemoveImpl(const TierNamespace& ns, absl::string_view key) override;
  // Deletes every block file of one namespace (or all).
  size_t ClearImpl(std::optional<absl::string_view> fingerprint) override;
  TierStats StatsImpl() const override;

  // What the kinds do differently (LocalFileTier, SharedFileTier):
  // The background thread's work (a local tier's warm-up scan, a shared tier's loop).
  virtual void Background() = 0;
  // Called once by Open before Background starts (a shared tier reads the journals).
  virtual void Started() {}
  // Called by Stop once the background thread ended.
  virtual void Stopped() {}
  // Whether the index holds every file (a warm local tier): a key it lacks is absent.
  virtual bool IndexComplete() const = 0;
  // What an indexed entry counts as, `meta` the index's (kPresent, or a shared tier's
  // kStale / kUnknown by age).
  virtual Presence IndexedPresenceLocked(const FileMeta& meta) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) = 0;
  // The stat a probe makes (a shared tier's goes past the client's caches).
  virtual std::optional<FileInfo> StatForProbe(const std::string& path) = 0;
  // The index took / dropped / read `key` (a local tier's eviction policy follows).
  virtual void IndexedLocked(const BlockKey& /*key*/) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {}
  virtual void UnindexedLocked(const BlockKey& /*key*/) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {}
  virtual void ReadingLocked(const BlockKey& /*key*/) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {}
  // This daemon learned at `when` that the block is gone (a shared tier remembers it).
  virtual void RemovalLearnedLocked(const BlockKey& /*key*/, absl::Time /*when*/)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {}
  // A read hit the block's file at `path` (a shared tier records the access).
  virtual void ReadHit(const BlockKey& /*key*/, const std::string& /*path*/) {}
  // This daemon wrote / deleted a block's file (a shared tier's journal tells the others);
  // Clear's removals go out at once with RemovalsDone.
  virtual void Written(absl::string_view /*fingerprint*/, absl::string_view /*key*/,
                       uint64_t /*file_bytes*/) {}
  virtual void Removed(absl::string_view /*fingerprint*/, absl::string_view /*key*/) {}
  virtual void RemovalsDone() {}
  // A write of an indexed key is skipped when the file is still there (a shared tier's
  // index may name a file another daemon deleted: it probes).
  virtual bool StillThere(const TierNamespace& ns, absl::string_view key) = 0;
  // Room for a write of `file_bytes` outside this daemon (a shared tier's usage ledger):
  // true = taken (EndAdmittedLocked gives it back), false = none needed or none usable; an
  // error refuses the write.
  virtual absl::StatusOr<bool> AdmitWrite(uint64_t /*file_bytes*/) { return false; }
  virtual void EndAdmittedLocked(uint64_t /*file_bytes*/, bool /*written*/)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {}
  // Evicts until `incoming` more bytes fit under the high watermark, adding the paths to
  // delete (outside the lock) to `doomed`; false when there is no room. A shared tier
  // trims after the fact instead (true).
  virtual bool EvictForLocked(uint64_t incoming, std::vector<std::string>* doomed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) = 0;
  // The used bytes Stats reports (a local tier's index; a shared tier's ledger).
  virtual uint64_t UsedBytesLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return used_bytes_;
  }

  // The store, for the kinds:
  // The index key of (namespace, key): the namespace's id from NamespaceIds (`known` when
  // the caller gave it and the ids are the daemon's), its fingerprint remembered for paths
  // and notices. NOT_FOUND when the id space is full, INVALID_ARGUMENT for a bad key.
  absl::StatusOr<BlockKey> KeyOfLocked(absl::string_view fingerprint, absl::string_view key,
                                       NamespaceId known = 0) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<BlockKey> KeyOfLocked(const TierNamespace& ns, absl::string_view key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return KeyOfLocked(ns.fingerprint, key, ns.id);
  }
  // The id of a namespace the caller names (without interning when `known` is usable).
  NamespaceId IdOf(absl::string_view fingerprint, NamespaceId known) const;
  // The fingerprint of a namespace id this tier indexed a block of.
  const std::string& FingerprintOfLocked(NamespaceId id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string PathOf(absl::string_view fingerprint, absl::string_view key) const;
  void InsertLocked(const BlockKey& key, uint64_t file_bytes, bool announce = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EraseLocked(const BlockKey& key, RemovalCause cause) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AnnounceLocked(const BlockKey& key, bool stored, RemovalCause cause)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Evicts as the kind does (EvictForLocked) after a look at a shrunk tier's disk.
  bool MakeRoomLocked(uint64_t incoming, std::vector<std::string>* doomed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnWriteError(const absl::Status& error);
  void OnBadFile(const BlockKey& key, const std::string& path, const BlockReadResult& miss);
  bool EnsureNamespaceFile(const TierNamespace& ns);
  uint64_t EffectiveCapacityLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A shrunk tier grows back when the disk has room again (see Faults above).
  void RecheckSpaceLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  TierState StateLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t NowMillis() const { return absl::ToUnixMillis(clock_->Now()); }
  bool OverHighMark(uint64_t bytes, uint64_t capacity) const {
    return static_cast<double>(bytes) > options_.high_watermark * static_cast<double>(capacity);
  }
  uint64_t NamespaceFileBytes(const std::string& fingerprint) const;
  // Every directory under root holding block files (<fingerprint>/<xx>/<yy>), or one
  // fingerprint's: fn(fingerprint, dir).
  void ForEachBlockDir(std::optional<absl::string_view> only,
                       const std::function<void(absl::string_view, const std::string&)>& fn);
  // The index is complete (local) or the loop runs (shared); wakes WaitWarm.
  void MarkWarm();

  const FileTierOptions options_;
  BlockFileSystem* const fs_;
  Clock* const clock_;
  mutable Mutex mu_;
  std::unique_ptr<NamespaceRegistry> own_ids_;  // only without options_.namespace_ids
  NamespaceIds* const ids_;
  // The fingerprint of every namespace id the index holds blocks of.
  absl::flat_hash_map<NamespaceId, std::string> fingerprints_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> namespace_files_ ABSL_GUARDED_BY(mu_);  // written
  absl::flat_hash_map<BlockKey, FileMeta> index_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<BlockKey, absl::Time> absent_until_ ABSL_GUARDED_BY(mu_);
  uint64_t used_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t writing_bytes_ ABSL_GUARDED_BY(mu_) = 0;    // room granted to writes in progress
  uint64_t shrunk_capacity_ ABSL_GUARDED_BY(mu_) = 0;  // 0: not shrunk
  absl::Time next_space_check_ ABSL_GUARDED_BY(mu_);
  absl::Time read_only_until_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  TierStats counters_ ABSL_GUARDED_BY(mu_);

  std::atomic<bool> warm_{false};
  std::atomic<bool> stopping_{false};
  mutable std::mutex wake_mu_;
  mutable std::condition_variable wake_;

 private:
  std::thread background_;
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_TIERS_FILE_TIER_H_
