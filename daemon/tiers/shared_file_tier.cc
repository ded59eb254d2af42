// SharedFileTier: the shared kind's presence ages, tombstones, recorded accesses, journal
// lines and usage-ledger admission (its loop and trim are in file_tier_scan.cc, its
// journals in file_tier_journal.cc).
#include "daemon/tiers/shared_file_tier.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace kvstrata {
namespace {

absl::string_view KeyBytes(const BlockKey& key) { return {key.bytes().data(), key.bytes().size()}; }

// What the other daemons wrote lately is known before the first lookup (the rest, if the
// journals are long, follows in the background).
constexpr absl::Duration kStartFollowBudget = absl::Seconds(2);

}  // namespace

SharedFileTier::SharedFileTier(FileTierOptions options)
    : FileTier(std::move(options)),
      usage_(std::make_unique<SharedUsage>(fs_, options_.root, SharedUsage::MakeHolderId())),
      journal_(std::make_unique<WriteJournal>(fs_, options_.root, usage_->holder(), clock_)),
      follower_(
          options_.follow_interval > absl::ZeroDuration()
              ? std::make_unique<JournalFollower>(journal_.get(), options_.followed_presence_ttl)
              : nullptr) {
  warm_ = true;  // No warm-up: its directory is the index.
}

void SharedFileTier::Started() { FollowJournals(kStartFollowBudget); }

void SharedFileTier::Stopped() {
  journal_->Flush();
  uint64_t unused = 0, in_flight = 0;
  {
    MutexLock lock(&mu_);
    std::swap(unused, grant_left_);
    in_flight = in_flight_bytes_;
  }
  // The unused grant goes back and the holder line goes (failure: the next scan corrects
  // the bytes and the line expires).
  (void)usage_->Release(unused, in_flight, NowMillis());
}

FileTier::Presence SharedFileTier::IndexedPresenceLocked(const FileMeta& meta) const {
  const absl::Time now = clock_->Now();
  const absl::Duration age = now - meta.verified;
  if (age < options_.presence_ttl) return Presence::kPresent;
  const absl::Duration counts =
      now < follow_ok_until_ ? options_.followed_presence_ttl : options_.stale_presence_ttl;
  return age < counts ? Presence::kStale : Presence::kUnknown;
}

void SharedFileTier::IndexedLocked(const BlockKey& key) {
  removed_at_.erase(key);  // Seen on disk by this daemon since.
}

void SharedFileTier::RemovalLearnedLocked(const BlockKey& key, absl::Time when) {
  if (removed_at_.size() >= (1u << 20)) {
    absl::erase_if(removed_at_, [&](const auto& r) { return when - r.second >= kTombstoneTtl; });
    if (removed_at_.size() >= (1u << 20)) removed_at_.clear();  // A mass removal: let go.
  }
  absl::Time& at = removed_at_[key];
  at = std::max(at, when);
}

bool SharedFileTier::TombstonedLocked(const BlockKey& key, absl::Time now) const {
  auto it = removed_at_.find(key);
  return it != removed_at_.end() && now - it->second < kTombstoneTtl;
}

void SharedFileTier::ReadHit(const BlockKey& key, const std::string& path) {
  absl::Time now = clock_->Now();
  uint64_t file_bytes = 0;
  std::string fingerprint;
  {
    MutexLock lock(&mu_);
    auto it = index_.find(key);
    if (it == index_.end()) return;
    if (now - it->second.recorded_access < options_.access_record_interval) return;
    it->second.recorded_access = now;
    file_bytes = it->second.file_bytes;
    fingerprint = FingerprintOfLocked(key.ns());
  }
  // The mtime is the access time every daemon of the shared tier orders eviction by; the
  // journal names the file again in this minute's bucket, which a trim reaches later.
  fs_->Touch(path);
  journal_->Record(now, fingerprint, KeyBytes(key), file_bytes);
}

void SharedFileTier::Written(absl::string_view fingerprint, absl::string_view key,
                             uint64_t file_bytes) {
  journal_->Record(clock_->Now(), fingerprint, key, file_bytes);
}

void SharedFileTier::Removed(absl::string_view fingerprint, absl::string_view key) {
  journal_->RecordRemoval(clock_->Now(), fingerprint, key);
}

void SharedFileTier::EndAdmittedLocked(uint64_t file_bytes, bool written) {
  in_flight_bytes_ -= file_bytes;
  if (!written) grant_left_ += file_bytes;  // back to this daemon's grant
}

absl::StatusOr<bool> SharedFileTier::AdmitWrite(uint64_t file_bytes) {
  uint64_t limit, held;
  {
    MutexLock lock(&mu_);
    if (grant_left_ >= file_bytes) {
      grant_left_ -= file_bytes;
      in_flight_bytes_ += file_bytes;
      return true;
    }
    limit = EffectiveCapacityLocked();
    held = HeldLocked();
  }
  // A grant of ~1% of the capacity (at most 256 MiB, at least this file): most writes take
  // their room from it without touching the ledger, and every daemon's unused grant is
  // what the directory may stay short of its capacity.
  const uint64_t want = std::max<uint64_t>(file_bytes, std::min<uint64_t>(limit / 100, 256 << 20));
  uint64_t asked = want;
  absl::StatusOr<SharedUsage::Grant> grant = usage_->Reserve(asked, limit, held, NowMillis());
  if (grant.ok() && !grant->granted && want > file_bytes) {
    asked = file_bytes;  // Nearly full: one file may still fit.
    grant = usage_->Reserve(asked, limit, held, NowMillis());
  }
  MutexLock lock(&mu_);
  if (!grant.ok()) {
    if (clock_->Now() - ledger_warned_ > absl::Minutes(1)) {
      ledger_warned_ = clock_->Now();
      spdlog::warn(
          "{}: the shared usage ledger {} cannot be used ({}): writing without it, "
          "the directory may pass its capacity until the next trim",
          options_.name, usage_->path(), grant.status().ToString());
    }
    return false;
  }
  shared_used_bytes_ = grant->after.bytes;
  if (OverHighMark(grant->after.bytes, limit) || !grant->granted) RequestTrim();
  if (!grant->granted) {
    ++counters_.refused_writes;
    return absl::UnavailableError(absl::StrCat(options_.name, " is full: its usage ledger holds ",
                                               grant->after.bytes, " of ", limit, " bytes"));
  }
  grant_left_ += asked - file_bytes;
  in_flight_bytes_ += file_bytes;
  return true;
}

void SharedFileTier::RequestTrim() {
  {
    std::lock_guard<std::mutex> wake(wake_mu_);
    trim_requested_ = true;
  }
  wake_.notify_all();  // Trim the shared tier now rather than at the next interval.
}

}  // namespace kvstrata
