// The file tiers' background work: LocalFileTier's warm-up scan, SharedFileTier's eviction
// loop and trim, and the tree walks they share with FileTier::Clear.
#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "daemon/tiers/block_path.h"
#include "daemon/tiers/file_tier.h"
#include "daemon/tiers/local_file_tier.h"
#include "daemon/tiers/namespace_file.h"
#include "daemon/tiers/shared_file_tier.h"
#include "spdlog/spdlog.h"

namespace kvstrata {
namespace {

constexpr absl::string_view kEvictLockName = ".kvstrata-evict.lock";
constexpr absl::Duration kStaleTempAge = absl::Hours(1);

// The key bytes of a "<hex key>.kv" file name; empty when the name is not one.
std::string KeyOfFileName(absl::string_view name) {
  if (!absl::ConsumeSuffix(&name, kBlockFileSuffix)) return "";
  return KeyOfHex(name);
}

// "<name>.kv.tmp.<pid>.<random>": the pid of the writer; 0 when not a temp file.
uint32_t TempWriterPid(absl::string_view name) {
  size_t at = name.find(".kv.tmp.");
  if (at == absl::string_view::npos) return 0;
  std::vector<absl::string_view> parts = absl::StrSplit(name.substr(at + 8), '.');
  uint32_t pid = 0;
  return !parts.empty() && absl::SimpleAtoi(parts[0], &pid) ? pid : 0;
}

struct FoundFile {
  std::string fingerprint, key, path;
  uint64_t bytes = 0;
  int64_t mtime_ns = 0;
};

}  // namespace

void FileTier::ForEachBlockDir(
    std::optional<absl::string_view> only,
    const std::function<void(absl::string_view, const std::string&)>& fn) {
  const std::string& root = options_.root;
  fs_->ListDirectory(root, [&](absl::string_view fp, bool is_dir) {
    if (!is_dir || !ValidateFingerprint(fp).ok()) return;
    if (only.has_value() && *only != fp) return;
    const std::string fp_dir = absl::StrCat(root, "/", fp);
    fs_->ListDirectory(fp_dir, [&](absl::string_view a, bool a_dir) {
      if (!a_dir || a.size() != 2) return;
      const std::string a_path = absl::StrCat(fp_dir, "/", a);
      fs_->ListDirectory(a_path, [&](absl::string_view b, bool b_dir) {
        if (b_dir && b.size() == 2) fn(fp, absl::StrCat(a_path, "/", b));
      });
    });
  });
}

uint64_t FileTier::NamespaceFileBytes(const std::string& fingerprint) const {
  absl::StatusOr<NamespaceSpec> spec = fs_->ReadNamespace(options_.root, fingerprint);
  return spec.ok() ? BlockFileBytes(BytesPerBlock(*spec)) : 0;
}

void LocalFileTier::WarmUp() {
  const absl::Time start = clock_->Now();
  const uint32_t my_pid = static_cast<uint32_t>(::getpid());
  uint64_t files = 0;
  ForEachBlockDir(std::nullopt, [&](absl::string_view fp, const std::string& dir) {
    if (stopping_) return;
    const std::string fingerprint(fp);
    const uint64_t known_bytes = NamespaceFileBytes(fingerprint);
    std::vector<std::pair<std::string, uint64_t>> found;
    fs_->ListDirectory(dir, [&](absl::string_view name, bool is_dir) {
      if (is_dir) return;
      const std::string path = absl::StrCat(dir, "/", name);
      uint32_t pid = TempWriterPid(name);
      if (pid != 0) {
        if (pid != my_pid) fs_->Remove(path);  // Left by a daemon that died mid-write.
        return;
      }
      std::string key = KeyOfFileName(name);
      if (key.empty()) return;
      uint64_t bytes = known_bytes;
      if (bytes == 0) {
        std::optional<FileInfo> info = fs_->Stat(path);
        bytes = info.has_value() ? info->size : 0;
      }
      found.emplace_back(std::move(key), bytes);
    });
    MutexLock lock(&mu_);
    if (known_bytes != 0) namespace_files_.insert(fingerprint);
    for (auto& [key, bytes] : found) {
      absl::StatusOr<BlockKey> k = KeyOfLocked(fingerprint, key);
      if (k.ok() && !index_.contains(*k)) InsertLocked(*k, bytes);
    }
    files += found.size();
    counters_.scanned_files = files;
  });
  MarkWarm();
  spdlog::info("{}: index warm: {} block files under {} in {}", options_.name, files, options_.root,
               absl::FormatDuration(clock_->Now() - start));
  // Respect the cap at once if the directory holds more than it allows (e.g. a smaller
  // capacity after a restart).
  std::vector<std::string> doomed;
  {
    MutexLock lock(&mu_);
    MakeRoomLocked(0, &doomed);
  }
  for (const std::string& path : doomed) fs_->Remove(path);
}

bool FileTier::WaitWarm(absl::Duration timeout) const {
  std::unique_lock<std::mutex> lock(wake_mu_);
  return wake_.wait_for(lock, absl::ToChronoNanoseconds(timeout), [this] {
    return warm_.load() || stopping_.load();
  }) && warm_.load();
}

void SharedFileTier::EvictionLoop() {
  using Steady = std::chrono::steady_clock;
  const auto round_every = absl::ToChronoNanoseconds(options_.shared_eviction_interval);
  const auto follow_every = absl::ToChronoNanoseconds(options_.follow_interval);
  Steady::time_point next_round = Steady::now();  // the first round at once
  bool trim_asked = false;
  while (!stopping_) {
    // Every tick (follow_interval): this daemon's journal lines since the last one go out
    // and the other daemons' come in.
    journal_->Flush();
    if (follower_ != nullptr) FollowJournals(options_.follow_interval);
    // Every round, the ledger says when to trim: past the high mark (from the journals, or
    // a scan when they fall short), or a full scan when no daemon made one within
    // shared_audit_interval (the audit: it also corrects the ledger). Without a usable
    // ledger, every round scans. Each round also renews this daemon's holder line. A write
    // past the high mark asks for a trim now (trim_requested_), not at the next round.
    if (trim_asked || Steady::now() >= next_round) {
      next_round = Steady::now() + round_every;
      absl::StatusOr<UsageLedger> ledger = usage_->Hold(HeldNow(), NowMillis());
      bool over = false, due = !ledger.ok();
      if (ledger.ok()) {
        MutexLock lock(&mu_);
        shared_used_bytes_ = ledger->bytes;
        over = OverHighMark(ledger->bytes, EffectiveCapacityLocked());
        due = clock_->Now() - absl::FromUnixMillis(ledger->scanned_unix_ms) >=
              options_.shared_audit_interval;
      }
      if (over || due) TrimShared(/*correct_ledger=*/due);
    }
    const Steady::time_point wake_at =
        follower_ != nullptr ? std::min(next_round, Steady::now() + follow_every) : next_round;
    std::unique_lock<std::mutex> lock(wake_mu_);
    trim_asked = wake_.wait_until(lock, wake_at, [this] {
      return stopping_.load() || trim_requested_;
    }) && !stopping_;
    trim_requested_ = false;
  }
}

size_t SharedFileTier::TrimShared(bool correct_ledger) {
  const std::string lock_path = absl::StrCat(options_.root, "/", kEvictLockName);
  std::unique_ptr<FileLock> trimming = fs_->TryLock(lock_path);
  if (trimming == nullptr) return 0;  // Another daemon is trimming.
  size_t from_journal = 0;
  if (!correct_ledger && TrimFromJournal(&from_journal)) return from_journal;

  // The ledger before the scan: what it grows by while the scan runs is room other writes
  // took meanwhile (SharedUsage::Reconcile).
  const absl::StatusOr<UsageLedger> at_start = usage_->Read();
  std::vector<FoundFile> files;
  uint64_t total = 0;
  const absl::Time now = clock_->Now();
  ForEachBlockDir(std::nullopt, [&](absl::string_view fp, const std::string& dir) {
    if (stopping_) return;  // Stopped mid-scan: delete nothing on a partial count.
    fs_->ListDirectory(dir, [&](absl::string_view name, bool is_dir) {
      if (is_dir || stopping_) return;
      std::string path = absl::StrCat(dir, "/", name);
      std::optional<FileInfo> info = fs_->Stat(path);
      if (!info.has_value()) return;
      const absl::Time mtime = info->modified;
      if (TempWriterPid(name) != 0) {
        if (now - mtime > kStaleTempAge) fs_->Remove(path);  // An abandoned write.
        return;
      }
      std::string key = KeyOfFileName(name);
      if (key.empty()) return;
      total += info->size;
      files.push_back(FoundFile{std::string(fp), std::move(key), std::move(path), info->size,
                                absl::ToUnixNanos(mtime)});
    });
  });
  if (stopping_) return 0;
  uint64_t capacity;
  {
    MutexLock lock(&mu_);
    capacity = EffectiveCapacityLocked();
  }
  // Usage = the files found + what the scan may not have seen (SharedUsage::Unseen). A
  // network filesystem's listing can lag other nodes' writes by a second or more, so
  // between corrections the ledger, when higher, is the usage.
  uint64_t usage = total;
  if (at_start.ok()) {
    absl::StatusOr<UsageLedger> after_scan = usage_->Read();
    if (after_scan.ok()) {
      usage += SharedUsage::Unseen(*at_start, *after_scan, NowMillis());
      if (!correct_ledger) usage = std::max(usage, after_scan->bytes);
    }
  }
  uint64_t deleted_bytes = 0;
  size_t deleted = 0;
  if (OverHighMark(usage, capacity)) {
    std::sort(files.begin(), files.end(),
              [](const FoundFile& a, const FoundFile& b) { return a.mtime_ns < b.mtime_ns; });
    const double low = options_.low_watermark * static_cast<double>(capacity);
    for (const FoundFile& f : files) {
      if (static_cast<double>(usage) <= low || stopping_) break;
      if (!fs_->Remove(f.path)) continue;
      Removed(f.fingerprint, f.key);
      total -= f.bytes;
      usage -= f.bytes;
      deleted_bytes += f.bytes;
      ++deleted;
      MutexLock lock(&mu_);
      ++counters_.evictions;
      absl::StatusOr<BlockKey> k = KeyOfLocked(f.fingerprint, f.key);
      if (k.ok()) EraseLocked(*k, RemovalCause::kEvicted);
    }
  }
  absl::StatusOr<UsageLedger> ledger = at_start;
  if (at_start.ok()) {
    ledger = correct_ledger ? usage_->Reconcile(*at_start, total, NowMillis())
                            : usage_->Release(deleted_bytes, HeldNow(), NowMillis());
  }
  if (correct_ledger && !stopping_) {
    absl::flat_hash_map<std::string, absl::Time> found;
    found.reserve(files.size());
    for (const FoundFile& f : files) found.emplace(f.path, absl::FromUnixNanos(f.mtime_ns));
    DropSpentBuckets(found);
  }
  MutexLock lock(&mu_);
  shared_used_bytes_ = ledger.ok() ? ledger->bytes : total;
  counters_.scanned_files = files.size() - deleted;
  return from_journal + deleted;
}

size_t FileTier::ClearImpl(std::optional<absl::string_view> fingerprint) {
  size_t removed = 0;
  ForEachBlockDir(fingerprint, [&](absl::string_view fp, const std::string& dir) {
    fs_->ListDirectory(dir, [&](absl::string_view name, bool is_dir) {
      const std::string key = is_dir ? std::string() : KeyOfFileName(name);
      if (!key.empty() && fs_->Remove(absl::StrCat(dir, "/", name))) {
        Removed(fp, key);
        ++removed;
        MutexLock lock(&mu_);
        absl::StatusOr<BlockKey> k = KeyOfLocked(fp, key);
        if (k.ok()) EraseLocked(*k, RemovalCause::kCleared);
      }
    });
  });
  // The other daemons learn of the removals now, not at the next tick.
  RemovalsDone();
  MutexLock lock(&mu_);
  std::vector<BlockKey> doomed;
  for (const auto& [key, meta] : index_) {
    if (!fingerprint.has_value() || FingerprintOfLocked(key.ns()) == *fingerprint)
      doomed.push_back(key);
  }
  for (const BlockKey& key : doomed) EraseLocked(key, RemovalCause::kCleared);
  absent_until_.clear();
  return removed;
}

}  // namespace kvstrata
