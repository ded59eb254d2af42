// ObjectTier: the "object" kind: blocks as objects in an S3-compatible bucket, shared by
// every node's daemon like the shared-file tier (docs/tiers.md, "The object tier").
//
// Layout (docs/on-disk-format.md): a block is the object `<prefix>/<fingerprint>/<2 hex>/
// <2 hex>/<hex key>.kv` holding exactly a block file (block_file_format.h: the 4096-byte
// header with its checksums, the payload, zero padding to 4096), so the same checks apply: a
// read verifies the header (magic, version, checksum, this namespace and key) and the
// payload's XXH3 before it answers a hit; an object that fails is deleted (counted as
// quarantined) and the read is a miss, never wrong bytes. `<prefix>/<fingerprint>/
// namespace.json` holds the namespace's spec; `<prefix>/.kvstrata/` the usage records
// (object_usage.h).
//
// What is where: an index of the blocks this daemon saw (its writes, hits, probes) and of
// those the other daemons' journals name (object_journal.h: every daemon journals the
// blocks it writes and deletes, and follows the others' journals every follow_interval and
// once at Open, reading the last followed_presence_ttl of them). An entry counts as present
// for presence_ttl since this daemon saw the object, then as kStale (a lookup counts it as
// a hit and rechecks it: lower_lookup.h) for stale_presence_ttl -- or followed_presence_ttl
// while the following keeps up -- then kUnknown; an entry learned from a journal starts as
// kStale. A block found absent counts as absent for negative_cache_ttl. So another daemon's
// block is known before the first lookup asks, without a request; one the journals did not
// name yet is found by a probe (HEAD). A block another daemon deleted leaves the index when
// its journal says so, and is a miss when read before that (never wrong bytes). Batches
// (ReadMany, WriteMany, ProbeMany) are pipelined over one curl multi handle (s3_client.h).
//
// Capacity: a write takes its room first (ObjectUsage::Reserve, in grants of ~1% of the
// capacity), so the bucket holds at most the capacity however many daemons write; the
// daemon that trims (the live one with the smallest id) lists the bucket when the usage
// passes the high watermark and deletes the least recently used objects (LastModified: a
// hit renews it at most once per access_record_interval with a copy of the object onto
// itself) down to the low one; its listing also corrects the usage (an audit, at least
// every audit_interval). A restart reuses what is there (the objects stay; the index
// fills again from probes).
//
// Faults: no answer (the server down) is a miss or a refused write, and the tier answers
// again once the server does. Thread-safe; the network calls run on the caller's thread
// (the background thread: record refreshes, trims, access records; the follower thread:
// the journals), never under the lock.
#ifndef KVSTRATA_DAEMON_TIERS_OBJECT_OBJECT_TIER_H_
#define KVSTRATA_DAEMON_TIERS_OBJECT_OBJECT_TIER_H_

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "daemon/common/clock.h"
#include "daemon/common/mutex.h"
#include "daemon/common/tier_table.h"
#include "daemon/config/config.h"
#include "daemon/namespaces/namespace_ids.h"
#include "daemon/tiers/block_tier.h"
#include "daemon/tiers/object/object_journal.h"
#include "daemon/tiers/object/object_usage.h"
#include "daemon/tiers/object/s3_client.h"

namespace kvstrata {

struct TierContext;

struct ObjectTierOptions {
  std::string name;       // the tier's label: logs
  Tier tier = Tier::kL2;  // its id in the daemon's tier table
  S3ClientOptions s3;
  std::string prefix = "kvstrata";  // [A-Za-z0-9._-] segments joined by '/'
  uint64_t capacity_bytes = 0;
  double high_watermark = 0.95, low_watermark = 0.85;
  absl::Duration presence_ttl = absl::Seconds(1);
  absl::Duration stale_presence_ttl = absl::Seconds(10);
  absl::Duration negative_cache_ttl = absl::Milliseconds(100);
  absl::Duration access_record_interval = absl::Seconds(60);
  absl::Duration eviction_interval = absl::Seconds(2);
  absl::Duration audit_interval = absl::Minutes(5);
  // Journal this daemon's writes and deletions and follow the others' this often (0: off).
  absl::Duration follow_interval = absl::Seconds(1);
  absl::Duration followed_presence_ttl = absl::Minutes(10);  // also the journals' lookback
  // A usage record not refreshed this long is a dead daemon's: its claim no longer counts.
  absl::Duration holder_expiry = absl::Seconds(60);
  // As FileTierOptions' (file_tier.h): blocks this tier wrote, findable and gone.
  std::function<void(NamespaceId ns, absl::string_view key, bool stored, RemovalCause cause)>
      observer;
  NamespaceIds* namespace_ids = nullptr;  // nullptr: observer notices carry the given ns.id
  Clock* clock = nullptr;                 // nullptr = the system clock
};

class ObjectTier final : public BlockTier {
 public:
  // Checks the credentials and the bucket with a signed listing and publishes this
  // daemon's usage record (so it can write there too): UNAUTHENTICATED (keys refused),
  // PERMISSION_DENIED, NOT_FOUND (no bucket), UNAVAILABLE (no answer), INVALID_ARGUMENT.
  static absl::StatusOr<std::unique_ptr<ObjectTier>> Open(ObjectTierOptions options);
  ~ObjectTier() override;

  Tier level() const override { return options_.tier; }
  std::string label() const override { return options_.name; }
  bool shared() const override { return true; }
  // Joins the background thread and gives this daemon's unused room back. Idempotent.
  void Stop() override;

  // One round of the background thread now (tests): access records, the record refresh,
  // and a trim when this daemon is the trimmer and the usage passed the high mark (or
  // `force_audit`). Returns the objects deleted.
  size_t RunRound(bool force_audit);
  // One round of the follower now (tests): this daemon's journal out, the others' in, for
  // at most `budget`. The journal lines read (0 with following off).
  size_t Follow(absl::Duration budget);
  const std::string& holder() const { return usage_.holder(); }

 protected:
  Presence CachedImpl(const TierNamespace& ns, absl::string_view key) const override;
  bool ProbeImpl(const TierNamespace& ns, absl::string_view key) override;
  bool ReadImpl(const TierNamespace& ns, absl::string_view key, absl::Span<char> dest) override;
  absl::StatusOr<WriteOutcome> WriteImpl(const TierNamespace& ns, absl::string_view key,
                                         absl::string_view payload) override;
  bool RemoveImpl(const TierNamespace& ns, absl::string_view key) override;
  size_t ClearImpl(std::optional<absl::string_view> fingerprint) override;
  TierStats StatsImpl() const override;
  std::vector<bool> ReadManyImpl(const TierNamespace& ns, absl::Span<const absl::string_view> keys,
                                 absl::Span<const absl::Span<char>> dests) override;
  std::vector<absl::StatusOr<WriteOutcome>> WriteManyImpl(
      const TierNamespace& ns, absl::Span<const absl::string_view> keys,
      absl::Span<const absl::string_view> payloads) override;
  std::vector<bool> ProbeManyImpl(const TierNamespace& ns,
                                  absl::Span<const absl::string_view> keys) override;

 private:
  struct Entry {
    uint64_t bytes = 0;  // the object's
    absl::Time verified;
    absl::Time recorded_access;
    NamespaceId ns = 0;
    std::string key;
    bool announced = false;  // written by this daemon: its removal is announced too
  };

  ObjectTier(ObjectTierOptions options, std::unique_ptr<S3Client> s3);
  std::string ObjectName(const TierNamespace& ns, absl::string_view key) const;
  NamespaceId IdOf(const TierNamespace& ns) const;
  void SeenLocked(const std::string& name, const TierNamespace& ns, absl::string_view key,
                  uint64_t bytes, bool announce) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void GoneLocked(const std::string& name, RemovalCause cause) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Room for `bytes` more (from the grant, else a new one); an error refuses the write.
  absl::Status Admit(uint64_t bytes);
  void EndWrite(uint64_t bytes, bool written);
  // Deletes `names` (with their sizes), counts them in the usage record; the deleted ones.
  size_t DeleteObjects(const std::vector<std::pair<std::string, uint64_t>>& objects,
                       RemovalCause cause);
  size_t Trim(bool force_audit);
  void Loop();
  void FollowLoop();  // object_follow.cc
  // The block an object name of this tier names; false when it names none.
  bool BlockOfName(absl::string_view name, std::string* fingerprint, std::string* key) const;
  // The journals' lines read by Follow, into the index.
  void LearnLocked(const std::vector<JournalEntry>& lines) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t NowMs() const { return absl::ToUnixMillis(clock_->Now()); }

  const ObjectTierOptions options_;
  const std::unique_ptr<S3Client> s3_;
  Clock* const clock_;
  ObjectUsage usage_;
  std::unique_ptr<ObjectJournal> journal_;  // nullptr with following off
  std::mutex usage_mu_;  // one usage call at a time (Reserve, Publish, Trim); before mu_
  mutable Mutex mu_;
  UsageRecord own_ ABSL_GUARDED_BY(mu_);  // this daemon's record (published: a snapshot)
  absl::flat_hash_map<std::string, Entry> index_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, absl::Time> absent_until_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> namespace_files_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> touch_ ABSL_GUARDED_BY(mu_);  // access records due
  uint64_t grant_left_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t used_ ABSL_GUARDED_BY(mu_) = 0;  // as last computed
  absl::Time last_audit_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Time follow_ok_until_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  TierStats counters_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> stopping_{false};
  std::mutex wake_mu_;
  std::condition_variable wake_;
  std::thread background_;
  std::thread follower_;
};

// The kind's maker (tier_factory.cc's kind table): reads the entry's keys (its kind keys:
// endpoint, bucket, credentials, ...; tier_kind_keys.h), loads the credentials and opens
// the tier. INVALID_ARGUMENT naming each bad key.
absl::StatusOr<std::unique_ptr<BlockTier>> MakeObjectTier(const LowerTierConfig& entry,
                                                          const TierDescriptor& descriptor,
                                                          const TierContext& context);

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_TIERS_OBJECT_OBJECT_TIER_H_
