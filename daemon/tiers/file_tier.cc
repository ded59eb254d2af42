// FileTier: index, reads, writes, capacity and faults. Background scans are in
// file_tier_scan.cc.
#include "daemon/tiers/file_tier.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/common/byte_size.h"
#include "daemon/tiers/block_path.h"
#include "daemon/tiers/namespace_file.h"
#include "spdlog/spdlog.h"

namespace kvstrata {
namespace {

std::string_view StdView(absl::string_view s) { return {s.data(), s.size()}; }
absl::string_view KeyBytes(const BlockKey& key) { return {key.bytes().data(), key.bytes().size()}; }

constexpr absl::Duration kStartFollowBudget = absl::Seconds(2);

}  // namespace

absl::StatusOr<std::unique_ptr<FileTier>> FileTier::Open(FileTierOptions options) {
  if (options.root.empty()) return absl::InvalidArgumentError(options.name + ": empty path");
  if (!(options.low_watermark > 0 && options.low_watermark <= options.high_watermark &&
        options.high_watermark <= 1)) {
    return absl::InvalidArgumentError(options.name + ": watermarks must be 0 < low <= high <= 1");
  }
  BlockFileSystem* fs = options.files != nullptr ? options.files : BlockFileSystem::Default();
  if (absl::Status s = fs->MakeDirectories(options.root); !s.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(options.name, " at ", options.root, " is not usable: ", s.message()));
  }
  absl::StatusOr<std::unique_ptr<EvictionPolicy>> policy =
      MakeEvictionPolicy(options.eviction_policy, 1024);
  if (!policy.ok()) return policy.status();
  std::unique_ptr<FileTier> tier(new FileTier(std::move(options)));
  {
    MutexLock lock(&tier->mu_);
    tier->policy_ = *std::move(policy);
  }
  // What the other daemons wrote lately is known before the first lookup (the rest, if the
  // journals are long, follows in the background).
  tier->FollowJournals(kStartFollowBudget);
  FileTier* self = tier.get();
  tier->background_ =
      std::thread([self] { self->options_.shared ? self->SharedEvictionLoop() : self->WarmUp(); });
  return tier;
}

FileTier::FileTier(FileTierOptions options)
    : options_(std::move(options)),
      fs_(options_.files != nullptr ? options_.files : BlockFileSystem::Default()),
      clock_(options_.clock != nullptr ? options_.clock : SystemClock::Get()),
      own_ids_(options_.namespace_ids == nullptr ? std::make_unique<NamespaceRegistry>() : nullptr),
      ids_(options_.namespace_ids != nullptr ? options_.namespace_ids : own_ids_.get()),
      usage_(options_.shared
                 ? std::make_unique<SharedUsage>(fs_, options_.root, SharedUsage::MakeHolderId())
                 : nullptr),
      journal_(options_.shared
                   ? std::make_unique<WriteJournal>(fs_, options_.root, usage_->holder(), clock_)
                   : nullptr),
      follower_(
          journal_ != nullptr && options_.follow_interval > absl::ZeroDuration()
              ? std::make_unique<JournalFollower>(journal_.get(), options_.followed_presence_ttl)
              : nullptr) {}

FileTier::~FileTier() { Stop(); }

void FileTier::Stop() {
  {
    std::lock_guard<std::mutex> lock(wake_mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (background_.joinable()) background_.join();
  if (journal_ != nullptr) journal_->Flush();
  uint64_t unused = 0, in_flight = 0;
  {
    MutexLock lock(&mu_);
    std::swap(unused, grant_left_);
    in_flight = in_flight_bytes_;
  }
  // The unused grant goes back and the holder line goes (failure: the next scan corrects
  // the bytes and the line expires).
  if (usage_ != nullptr) (void)usage_->Release(unused, in_flight, NowMillis());
}

NamespaceId FileTier::IdOf(absl::string_view fingerprint, NamespaceId known) const {
  return known != 0 && own_ids_ == nullptr ? known : ids_->IdOf(fingerprint);
}

absl::StatusOr<BlockKey> FileTier::KeyOfLocked(absl::string_view fingerprint, absl::string_view key,
                                               NamespaceId known) {
  const NamespaceId id = IdOf(fingerprint, known);
  if (id == 0) return absl::NotFoundError("no namespace id left for this namespace");
  fingerprints_.try_emplace(id, fingerprint);
  return BlockKey::Make(id, StdView(key));
}

const std::string& FileTier::FingerprintOfLocked(NamespaceId id) const {
  return fingerprints_.at(id);
}

std::string FileTier::PathOf(absl::string_view fingerprint, absl::string_view key) const {
  absl::StatusOr<std::string> path = BlockFilePath(options_.root, fingerprint, key);
  return path.ok() ? *std::move(path) : std::string();
}

FileTier::Presence FileTier::CachedImpl(const TierNamespace& ns, absl::string_view key) const {
  const bool complete = !options_.shared && warm_.load(std::memory_order_acquire);
  const NamespaceId id = IdOf(ns.fingerprint, ns.id);
  if (id == 0) return complete ? Presence::kAbsent : Presence::kUnknown;
  absl::StatusOr<BlockKey> k = BlockKey::Make(id, StdView(key));
  if (!k.ok()) return Presence::kAbsent;
  MutexLock lock(&mu_);
  auto indexed = index_.find(*k);
  if (indexed != index_.end()) {
    if (!options_.shared) return Presence::kPresent;
    const absl::Time now = clock_->Now();
    const absl::Duration age = now - indexed->second.verified;
    if (age < options_.presence_ttl) return Presence::kPresent;
    const absl::Duration counts =
        now < follow_ok_until_ ? options_.followed_presence_ttl : options_.stale_presence_ttl;
    return age < counts ? Presence::kStale : Presence::kUnknown;
  }
  if (complete) return Presence::kAbsent;
  auto absent = absent_until_.find(*k);
  if (absent != absent_until_.end() && absent->second > clock_->Now()) return Presence::kAbsent;
  return Presence::kUnknown;
}

bool FileTier::ProbeImpl(const TierNamespace& ns, absl::string_view key) {
  const std::string path = PathOf(ns.fingerprint, key);
  if (path.empty()) return false;
  std::optional<FileInfo> info = options_.shared ? fs_->StatUncached(path) : fs_->Stat(path);
  const bool present = info.has_value() && info->regular;
  MutexLock lock(&mu_);
  absl::StatusOr<BlockKey> k = KeyOfLocked(ns, key);
  if (!k.ok()) return false;
  if (present) {
    absent_until_.erase(*k);
    auto it = index_.find(*k);
    if (it == index_.end()) {
      InsertLocked(*k, info->size);
    } else {
      it->second.verified = clock_->Now();
    }
    return true;
  }
  // Gone since it was indexed (another daemon's trim, an rm): forget it.
  EraseLocked(*k, RemovalCause::kEvicted);
  if (absent_until_.size() > (1u << 20)) absent_until_.clear();
  absent_until_[*k] = clock_->Now() + options_.negative_cache_ttl;
  return false;
}

void FileTier::AnnounceLocked(const BlockKey& key, bool stored, RemovalCause cause) {
  if (!options_.observer) return;
  options_.observer(key.ns(), KeyBytes(key), stored, cause);
}

void FileTier::InsertLocked(const BlockKey& key, uint64_t file_bytes, bool announce) {
  FileMeta meta;
  meta.file_bytes = file_bytes;
  meta.recorded_access = clock_->Now();
  meta.verified = meta.recorded_access;
  meta.announced = announce;
  index_.emplace(key, meta);
  removed_at_.erase(key);  // Seen on disk by this daemon since.
  if (announce) AnnounceLocked(key, /*stored=*/true, RemovalCause::kEvicted);
  used_bytes_ += file_bytes;
  if (!options_.shared) {
    uint64_t id = key.Fingerprint();
    if (by_id_.emplace(id, key).second) policy_->OnInsert(id);
  }
}

void FileTier::EraseLocked(const BlockKey& key, RemovalCause cause) {
  // A shared tier remembers the removal, indexed or not: no older journal line of another
  // daemon undoes it.
  TombstoneLocked(key, clock_->Now());
  auto it = index_.find(key);
  if (it == index_.end()) return;
  if (it->second.announced) AnnounceLocked(key, /*stored=*/false, cause);
  used_bytes_ -= std::min(used_bytes_, it->second.file_bytes);
  index_.erase(it);
  if (!options_.shared) {
    uint64_t id = key.Fingerprint();
    auto b = by_id_.find(id);
    if (b != by_id_.end() && b->second == key) {
      by_id_.erase(b);
      policy_->OnErase(id);
    }
  }
}

void FileTier::TombstoneLocked(const BlockKey& key, absl::Time when) {
  if (!options_.shared) return;
  if (removed_at_.size() >= (1u << 20)) {
    absl::erase_if(removed_at_, [&](const auto& r) { return when - r.second >= kTombstoneTtl; });
    if (removed_at_.size() >= (1u << 20)) removed_at_.clear();  // A mass removal: let go.
  }
  absl::Time& at = removed_at_[key];
  at = std::max(at, when);
}

bool FileTier::TombstonedLocked(const BlockKey& key, absl::Time now) const {
  auto it = removed_at_.find(key);
  return it != removed_at_.end() && now - it->second < kTombstoneTtl;
}

bool FileTier::ReadImpl(const TierNamespace& ns, absl::string_view key, absl::Span<char> dest) {
  const std::string path = PathOf(ns.fingerprint, key);
  BlockKey k;
  {
    MutexLock lock(&mu_);
    absl::StatusOr<BlockKey> made = KeyOfLocked(ns, key);
    if (path.empty() || !made.ok()) return false;
    k = *made;
    auto it = index_.find(k);
    if (it != index_.end()) {
      ++it->second.readers;
      if (!options_.shared) policy_->OnAccess(k.Fingerprint());
    }
  }
  BlockReadResult result = fs_->ReadBlock(path, ns.fingerprint, key, dest);
  {
    MutexLock lock(&mu_);
    auto it = index_.find(k);
    if (it != index_.end() && it->second.readers > 0) --it->second.readers;
    if (result.hit()) {
      if (it == index_.end()) {
        InsertLocked(k, BlockFileBytes(dest.size()));
      } else {
        it->second.verified = clock_->Now();
      }
    } else {
      if (result.miss == BlockMiss::kIoError) ++counters_.read_errors;
      if (result.miss == BlockMiss::kAbsent) EraseLocked(k, RemovalCause::kEvicted);
    }
  }
  if (result.hit()) {
    RecordAccess(k, path);
  } else if (ShouldQuarantine(result.miss)) {
    OnBadFile(k, path, result);
  } else if (result.miss == BlockMiss::kIoError) {
    spdlog::warn("{}: read of {} failed: {}", options_.name, path, result.detail);
  }
  return result.hit();
}

void FileTier::RecordAccess(const BlockKey& key, const std::string& path) {
  if (!options_.shared) return;
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

void FileTier::RecordRemoval(absl::string_view fingerprint, absl::string_view key) {
  if (journal_ != nullptr) journal_->RecordRemoval(clock_->Now(), fingerprint, key);
}

void FileTier::OnBadFile(const BlockKey& key, const std::string& path,
                         const BlockReadResult& miss) {
  absl::StatusOr<std::string> moved = fs_->Quarantine(path, options_.root);
  spdlog::warn("{}: {} is bad ({}: {}); {}", options_.name, path,
               std::string(BlockMissName(miss.miss)), miss.detail,
               moved.ok() ? "quarantined to " + *moved : "quarantine failed");
  std::string fingerprint;
  {
    MutexLock lock(&mu_);
    if (moved.ok()) ++counters_.quarantined;
    fingerprint = FingerprintOfLocked(key.ns());
    EraseLocked(key, RemovalCause::kEvicted);
  }
  if (moved.ok()) RecordRemoval(fingerprint, KeyBytes(key));
}

bool FileTier::EnsureNamespaceFile(const TierNamespace& ns) {
  {
    MutexLock lock(&mu_);
    if (namespace_files_.contains(ns.fingerprint)) return true;
  }
  absl::StatusOr<std::string> written = fs_->WriteNamespace(options_.root, ns.spec);
  if (!written.ok()) {
    OnWriteError(written.status());
    return false;
  }
  MutexLock lock(&mu_);
  namespace_files_.insert(ns.fingerprint);
  return true;
}

absl::StatusOr<BlockTier::WriteOutcome> FileTier::WriteImpl(const TierNamespace& ns,
                                                            absl::string_view key,
                                                            absl::string_view payload) {
  const std::string path = PathOf(ns.fingerprint, key);
  if (path.empty()) return absl::InvalidArgumentError("bad fingerprint or key");
  const uint64_t file_bytes = BlockFileBytes(payload.size());
  std::vector<std::string> doomed;
  bool room = false;
  // A shared tier's index may name a file another daemon deleted since: check the disk
  // (else this daemon would never write the block again).
  bool indexed = false;
  {
    MutexLock lock(&mu_);
    absl::StatusOr<BlockKey> k = KeyOfLocked(ns, key);
    if (!k.ok()) return k.status();
    indexed = index_.contains(*k);
  }
  if (indexed && (!options_.shared || ProbeImpl(ns, key))) return WriteOutcome::kAlreadyPresent;
  {
    MutexLock lock(&mu_);
    absl::StatusOr<BlockKey> k = KeyOfLocked(ns, key);
    if (!k.ok()) return k.status();
    if (index_.contains(*k)) return WriteOutcome::kAlreadyPresent;
    room = StateLocked() != TierState::kReadOnly && MakeRoomLocked(file_bytes, &doomed);
    if (room) writing_bytes_ += file_bytes;
    if (!room) ++counters_.refused_writes;
  }
  for (const std::string& victim : doomed) fs_->Remove(victim);
  if (!room) return absl::UnavailableError(options_.name + " is read-only or has no room");
  // The room granted above stays counted (writing_bytes_) until this write ends, so that
  // concurrent writers cannot all take the same room.
  struct Release {
    FileTier* tier;
    uint64_t bytes;
    ~Release() {
      MutexLock lock(&tier->mu_);
      tier->writing_bytes_ -= bytes;
    }
  } release{this, file_bytes};
  // A shared tier's room comes from the usage ledger; it goes back to this daemon's grant
  // when the write does not happen.
  bool holds_room = false;
  if (options_.shared) {
    absl::StatusOr<bool> admitted = AdmitShared(file_bytes);
    if (!admitted.ok()) return admitted.status();
    holds_room = *admitted;
  }
  auto failed = [&](absl::Status error) {
    if (holds_room) {
      MutexLock lock(&mu_);
      in_flight_bytes_ -= file_bytes;
      grant_left_ += file_bytes;
    }
    return error;
  };
  if (!EnsureNamespaceFile(ns)) {
    return failed(absl::UnavailableError(options_.name + " write failed"));
  }
  absl::StatusOr<BlockHeader> header =
      MakeBlockHeader(ns.fingerprint, key, payload, absl::ToUnixMillis(clock_->Now()));
  if (!header.ok()) return failed(header.status());
  absl::StatusOr<BlockWriteInfo> written =
      fs_->WriteBlock(path, *header, payload, BlockWriteOptions{options_.fsync, true});
  if (!written.ok()) {
    OnWriteError(written.status());
    return failed(written.status());
  }
  if (journal_ != nullptr) journal_->Record(clock_->Now(), ns.fingerprint, key, file_bytes);
  MutexLock lock(&mu_);
  if (holds_room) in_flight_bytes_ -= file_bytes;  // Now a file: the scans see it.
  absl::StatusOr<BlockKey> k = KeyOfLocked(ns, key);
  absent_until_.erase(*k);
  if (!index_.contains(*k)) InsertLocked(*k, file_bytes, /*announce=*/true);
  return WriteOutcome::kWritten;
}

absl::StatusOr<bool> FileTier::AdmitShared(uint64_t file_bytes) {
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

void FileTier::RequestTrim() {
  {
    std::lock_guard<std::mutex> wake(wake_mu_);
    trim_requested_ = true;
  }
  wake_.notify_all();  // Trim the shared tier now rather than at the next interval.
}

uint64_t FileTier::EffectiveCapacityLocked() const {
  return shrunk_capacity_ != 0 ? std::min(shrunk_capacity_, options_.capacity_bytes)
                               : options_.capacity_bytes;
}

TierState FileTier::StateLocked() const {
  if (read_only_until_ > clock_->Now()) return TierState::kReadOnly;
  return shrunk_capacity_ != 0 ? TierState::kDegraded : TierState::kOk;
}

void FileTier::RecheckSpaceLocked() {
  const absl::Time now = clock_->Now();
  if (shrunk_capacity_ == 0 || now < next_space_check_) return;
  next_space_check_ = now + options_.space_recheck_interval;
  std::optional<uint64_t> free_bytes_now = fs_->FreeBytes(options_.root);
  if (!free_bytes_now.has_value()) return;
  const uint64_t free_bytes = *free_bytes_now;
  const uint64_t room = used_bytes_ + free_bytes / 10 * 9;
  if (room <= shrunk_capacity_) return;
  if (room >= options_.capacity_bytes) {
    shrunk_capacity_ = 0;
    spdlog::info("{}: the disk has room again; capacity back to {}", options_.name,
                 HumanByteSize(options_.capacity_bytes));
  } else {
    shrunk_capacity_ = room;
    spdlog::info("{}: the disk has more room; capacity grown to {}", options_.name,
                 HumanByteSize(room));
  }
}

bool FileTier::MakeRoomLocked(uint64_t incoming, std::vector<std::string>* doomed) {
  RecheckSpaceLocked();
  if (options_.shared) return true;  // Trimmed by the eviction loop.
  incoming += writing_bytes_;
  const double capacity = static_cast<double>(EffectiveCapacityLocked());
  if (static_cast<double>(used_bytes_ + incoming) <= options_.high_watermark * capacity) {
    return true;
  }
  auto evictable = [this](EvictionPolicy::Id id) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    auto b = by_id_.find(id);
    if (b == by_id_.end()) return false;
    auto it = index_.find(b->second);
    return it != index_.end() && it->second.readers == 0;
  };
  while (static_cast<double>(used_bytes_ + incoming) > options_.low_watermark * capacity) {
    std::optional<EvictionPolicy::Id> victim = policy_->PickVictim(evictable);
    if (!victim.has_value()) break;
    BlockKey key = by_id_.at(*victim);
    by_id_.erase(*victim);  // The policy already forgot it.
    auto it = index_.find(key);
    if (it->second.announced) AnnounceLocked(key, /*stored=*/false, RemovalCause::kEvicted);
    used_bytes_ -= std::min(used_bytes_, it->second.file_bytes);
    index_.erase(it);
    doomed->push_back(PathOf(FingerprintOfLocked(key.ns()), KeyBytes(key)));
    ++counters_.evictions;
  }
  return static_cast<double>(used_bytes_ + incoming) <= options_.high_watermark * capacity;
}

void FileTier::OnWriteError(const absl::Status& error) {
  MutexLock lock(&mu_);
  ++counters_.write_errors;
  if (absl::IsResourceExhausted(error)) {
    // The disk is fuller than the configured capacity: shrink to what we hold now (and
    // further on every later ENOSPC). Holding nothing leaves no room at all (1 byte, as 0
    // means "not shrunk"): writes are refused instead of hitting the full disk again.
    const uint64_t held = std::max<uint64_t>(1, used_bytes_);
    shrunk_capacity_ = shrunk_capacity_ != 0 ? std::min(shrunk_capacity_, held) : held;
    next_space_check_ = clock_->Now() + options_.space_recheck_interval;
    spdlog::warn("{}: disk full ({}); capacity shrunk to {}", options_.name,
                 std::string(error.message()), HumanByteSize(shrunk_capacity_));
  } else if (absl::IsAborted(error)) {
    // A directory another daemon was creating or replacing through its own mount (ENOENT /
    // ESTALE past MakeDirectories' and the open's retries, or ESTALE anywhere in the write):
    // this write is lost, the tier is fine.
    spdlog::info("{}: write dropped ({}); the tier stays writable", options_.name,
                 std::string(error.message()));
  } else {
    read_only_until_ = clock_->Now() + options_.read_only_cooldown;
    spdlog::warn("{}: write failed ({}); read-only for {}", options_.name,
                 std::string(error.message()), absl::FormatDuration(options_.read_only_cooldown));
  }
}

bool FileTier::RemoveImpl(const TierNamespace& ns, absl::string_view key) {
  const std::string path = PathOf(ns.fingerprint, key);
  if (path.empty()) return false;
  {
    MutexLock lock(&mu_);
    absl::StatusOr<BlockKey> k = KeyOfLocked(ns, key);
    if (k.ok()) EraseLocked(*k, RemovalCause::kAdminEvict);
  }
  if (!fs_->Remove(path)) return false;
  RecordRemoval(ns.fingerprint, key);
  return true;
}

TierStats FileTier::StatsImpl() const {
  MutexLock lock(&mu_);
  TierStats st = counters_;
  st.capacity_bytes = options_.capacity_bytes;
  st.effective_bytes = EffectiveCapacityLocked();
  st.used_bytes = options_.shared ? shared_used_bytes_ : used_bytes_;
  st.blocks = index_.size();
  st.warm = warm_.load();
  st.state = StateLocked();
  return st;
}

}  // namespace kvstrata
