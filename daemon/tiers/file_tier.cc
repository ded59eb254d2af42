// FileTier, the block-file store both file kinds share: index, reads, writes, capacity and
// faults. The kinds' own parts: local_file_tier.cc, shared_file_tier.cc; background scans
// in file_tier_scan.cc, the shared tier's journals in file_tier_journal.cc.
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
#include "daemon/tiers/local_file_tier.h"
#include "daemon/tiers/namespace_file.h"
#include "daemon/tiers/shared_file_tier.h"
#include "spdlog/spdlog.h"

namespace kvstrata {
namespace {

std::string_view StdView(absl::string_view s) { return {s.data(), s.size()}; }
absl::string_view KeyBytes(const BlockKey& key) { return {key.bytes().data(), key.bytes().size()}; }

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
  std::unique_ptr<FileTier> tier;
  if (options.shared) {
    tier = std::make_unique<SharedFileTier>(std::move(options));
  } else {
    absl::StatusOr<std::unique_ptr<EvictionPolicy>> policy =
        MakeEvictionPolicy(options.eviction_policy, 1024);
    if (!policy.ok()) return policy.status();
    tier = std::make_unique<LocalFileTier>(std::move(options), *std::move(policy));
  }
  tier->Started();
  FileTier* self = tier.get();
  tier->background_ = std::thread([self] { self->Background(); });
  return tier;
}

FileTier::FileTier(FileTierOptions options)
    : options_(std::move(options)),
      fs_(options_.files != nullptr ? options_.files : BlockFileSystem::Default()),
      clock_(options_.clock != nullptr ? options_.clock : SystemClock::Get()),
      own_ids_(options_.namespace_ids == nullptr ? std::make_unique<NamespaceRegistry>() : nullptr),
      ids_(options_.namespace_ids != nullptr ? options_.namespace_ids : own_ids_.get()) {}

FileTier::~FileTier() { Stop(); }

void FileTier::Stop() {
  {
    std::lock_guard<std::mutex> lock(wake_mu_);
    if (stopping_.exchange(true)) return;  // Stopped already (the kind's destructor)
  }
  wake_.notify_all();
  if (background_.joinable()) background_.join();
  Stopped();
}

void FileTier::MarkWarm() {
  {
    std::lock_guard<std::mutex> lock(wake_mu_);
    warm_.store(true, std::memory_order_release);
  }
  wake_.notify_all();
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
  const bool complete = IndexComplete();
  const NamespaceId id = IdOf(ns.fingerprint, ns.id);
  if (id == 0) return complete ? Presence::kAbsent : Presence::kUnknown;
  absl::StatusOr<BlockKey> k = BlockKey::Make(id, StdView(key));
  if (!k.ok()) return Presence::kAbsent;
  MutexLock lock(&mu_);
  auto indexed = index_.find(*k);
  if (indexed != index_.end()) return IndexedPresenceLocked(indexed->second);
  if (complete) return Presence::kAbsent;
  auto absent = absent_until_.find(*k);
  if (absent != absent_until_.end() && absent->second > clock_->Now()) return Presence::kAbsent;
  return Presence::kUnknown;
}

bool FileTier::ProbeImpl(const TierNamespace& ns, absl::string_view key) {
  const std::string path = PathOf(ns.fingerprint, key);
  if (path.empty()) return false;
  std::optional<FileInfo> info = StatForProbe(path);
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
  if (announce) AnnounceLocked(key, /*stored=*/true, RemovalCause::kEvicted);
  used_bytes_ += file_bytes;
  IndexedLocked(key);
}

void FileTier::EraseLocked(const BlockKey& key, RemovalCause cause) {
  // A shared tier remembers the removal, indexed or not: no older journal line of another
  // daemon undoes it.
  RemovalLearnedLocked(key, clock_->Now());
  auto it = index_.find(key);
  if (it == index_.end()) return;
  if (it->second.announced) AnnounceLocked(key, /*stored=*/false, cause);
  used_bytes_ -= std::min(used_bytes_, it->second.file_bytes);
  index_.erase(it);
  UnindexedLocked(key);
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
      ReadingLocked(k);
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
    ReadHit(k, path);
  } else if (ShouldQuarantine(result.miss)) {
    OnBadFile(k, path, result);
  } else if (result.miss == BlockMiss::kIoError) {
    spdlog::warn("{}: read of {} failed: {}", options_.name, path, result.detail);
  }
  return result.hit();
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
  if (moved.ok()) Removed(fingerprint, KeyBytes(key));
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
  if (indexed && StillThere(ns, key)) return WriteOutcome::kAlreadyPresent;
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
  absl::StatusOr<bool> admitted = AdmitWrite(file_bytes);
  if (!admitted.ok()) return admitted.status();
  const bool holds_room = *admitted;
  auto failed = [&](absl::Status error) {
    if (holds_room) {
      MutexLock lock(&mu_);
      EndAdmittedLocked(file_bytes, /*written=*/false);
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
  Written(ns.fingerprint, key, file_bytes);
  MutexLock lock(&mu_);
  if (holds_room) EndAdmittedLocked(file_bytes, /*written=*/true);  // Now a file: scans see it
  absl::StatusOr<BlockKey> k = KeyOfLocked(ns, key);
  absent_until_.erase(*k);
  if (!index_.contains(*k)) InsertLocked(*k, file_bytes, /*announce=*/true);
  return WriteOutcome::kWritten;
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
  return EvictForLocked(incoming, doomed);
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
  Removed(ns.fingerprint, key);
  return true;
}

TierStats FileTier::StatsImpl() const {
  MutexLock lock(&mu_);
  TierStats st = counters_;
  st.capacity_bytes = options_.capacity_bytes;
  st.effective_bytes = EffectiveCapacityLocked();
  st.used_bytes = UsedBytesLocked();
  st.blocks = index_.size();
  st.warm = warm_.load();
  st.state = StateLocked();
  return st;
}

}  // namespace kvstrata
