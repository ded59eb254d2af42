// ObjectUsage: the bytes an object tier's blocks take in the bucket, kept by every daemon on
// the bucket without a lock or an external evictor -- the bucket's counterpart of the
// shared-file tier's usage ledger (shared_usage.h), which needs flock.
//
// Each daemon ("holder", SharedUsage::MakeHolderId()) writes only its own record object,
// `<control>/usage/<holder>`, so no two daemons ever write one object:
//   kvstrata-object-usage 1
//   written <u64>   bytes of the block objects this daemon PUT (new ones)
//   deleted <u64>   bytes of the block objects it DELETEd (trims, removals, clears)
//   held <u64>      room it took and has not written yet (its grant + writes in flight)
//   unix_ms <i64>   when it last wrote the record (a holder that stopped writing it for
//                   the expiry -- kDefaultHolderExpiry unless the tier's config says -- is
//                   dead: its `held` no longer counts)
// and whichever daemon trims writes `<control>/audit` after it listed the bucket:
//   kvstrata-object-audit 1
//   listed <u64>    bytes of the block objects the listing found
//   unix_ms <i64>
//   base <holder> <written> <deleted>   each record as read just before that listing
// The usage is then listed + sum over the records of (written - deleted) - (their base) +
// the live records' held: what was written or deleted since the listing, and the room taken.
//
// Admission (Reserve): a daemon takes room *before* it writes. It reads every record,
// and only when the usage plus `want` fits the limit it publishes its record with the
// larger `held`, then reads them all again and withdraws (refused) if the sum now passes
// the limit. Of two daemons that reserve at once, the one that reads last sees both claims
// (a listing reads what was written before it: S3's read-after-write consistency), so the
// bucket never holds more than the limit however many daemons write.
//
// The trimmer is the live holder with the smallest id (no lease object: every daemon that
// sees the same records agrees). Records of dead holders that did nothing since the last
// audit are folded into it (deleted). A record or audit that does not parse counts as
// absent (the next audit corrects the bytes).
//
// Every call blocks on the bucket (a listing and a GET per record). Thread-compatible: the
// tier serializes its calls.
#ifndef KVSTRATA_DAEMON_TIERS_OBJECT_OBJECT_USAGE_H_
#define KVSTRATA_DAEMON_TIERS_OBJECT_OBJECT_USAGE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "daemon/tiers/object/s3_client.h"

namespace kvstrata {

struct UsageRecord {
  uint64_t written = 0, deleted = 0, held = 0;
  int64_t unix_ms = 0;
  bool operator==(const UsageRecord&) const = default;
};

struct UsageAudit {
  uint64_t listed = 0;
  int64_t unix_ms = 0;
  std::map<std::string, std::pair<uint64_t, uint64_t>> base;  // holder -> written, deleted
  bool operator==(const UsageAudit&) const = default;
};

// Text <-> value; nullopt for anything but exactly the format above.
std::string FormatUsageRecord(const UsageRecord& record);
std::optional<UsageRecord> ParseUsageRecord(absl::string_view text);
std::string FormatUsageAudit(const UsageAudit& audit);
std::optional<UsageAudit> ParseUsageAudit(absl::string_view text);

class ObjectUsage {
 public:
  static constexpr absl::Duration kDefaultHolderExpiry = absl::Seconds(60);

  // What the bucket says now: every record (by holder) and the last audit.
  struct View {
    std::map<std::string, UsageRecord> records;
    UsageAudit audit;
    absl::Duration expiry = kDefaultHolderExpiry;  // the ObjectUsage's
    // Whether `r` was refreshed within the expiry before `now_ms`.
    bool Live(const UsageRecord& r, int64_t now_ms) const;
    // The usage, with `own` in place of this daemon's record as the bucket has it.
    uint64_t Used(const std::string& holder, const UsageRecord& own, int64_t now_ms) const;
    // The live holder with the smallest id (this one counts as live).
    std::string Trimmer(const std::string& holder, int64_t now_ms) const;
  };

  // `control`: the prefix of the tier's own objects ("<prefix>/.kvstrata"). Not owned.
  // `expiry`: a record not refreshed this long is a dead holder's (> 0).
  ObjectUsage(S3Client* s3, std::string control, std::string holder,
              absl::Duration expiry = kDefaultHolderExpiry);
  const std::string& holder() const { return holder_; }

  absl::StatusOr<View> Read();
  absl::Status Publish(const UsageRecord& own);

  struct Grant {
    bool granted = false;
    uint64_t used = 0;  // the usage after the call (with the grant, when granted)
  };
  // Takes `want` bytes into own.held (and publishes) when the usage then stays within
  // `limit`; on refusal own is as it was (published again if it was published with the
  // claim). own.unix_ms is set to `now_ms`.
  absl::StatusOr<Grant> Reserve(UsageRecord& own, uint64_t want, uint64_t limit, int64_t now_ms);
  // After a listing that found `listed` bytes, started when the records were `before`:
  // writes the audit and deletes the records of dead holders that did nothing since.
  absl::Status Audit(const View& before, uint64_t listed, int64_t now_ms);

  std::string RecordKey(absl::string_view holder) const;
  std::string AuditKey() const;

 private:
  S3Client* const s3_;
  const std::string control_;
  const std::string holder_;
  const absl::Duration expiry_;
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_TIERS_OBJECT_OBJECT_USAGE_H_
