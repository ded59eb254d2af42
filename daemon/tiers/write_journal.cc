#include "daemon/tiers/write_journal.h"

#include <unistd.h>

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "daemon/tiers/block_path.h"
#include "spdlog/spdlog.h"

namespace kvstrata {
namespace {

constexpr size_t kBucketNameDigits = 10;
constexpr absl::string_view kLogSuffix = ".log";

// A journal file is read this much at a time.
constexpr size_t kReadChunk = 256 * 1024;

}  // namespace

WriteJournal::WriteJournal(BlockFileSystem* fs, std::string root, std::string holder, Clock* clock)
    : fs_(fs),
      dir_(absl::StrCat(root, "/", kDirName)),
      holder_(std::move(holder)),
      clock_(clock != nullptr ? clock : SystemClock::Get()) {}

int64_t WriteJournal::BucketOf(absl::Time when) {
  return absl::ToUnixSeconds(when) / absl::ToInt64Seconds(kBucket);
}

absl::Time WriteJournal::BucketEnd(int64_t bucket) {
  return absl::FromUnixSeconds((bucket + 1) * absl::ToInt64Seconds(kBucket));
}

std::string WriteJournal::BucketDir(int64_t bucket) const {
  return absl::StrFormat("%s/%0*d", dir_, kBucketNameDigits, bucket);
}

std::string WriteJournal::FormatLine(const JournalEntry& entry) {
  return entry.removed
             ? absl::StrCat(entry.fingerprint, " ", HexKey(entry.key), " -")
             : absl::StrCat(entry.fingerprint, " ", HexKey(entry.key), " ", entry.file_bytes);
}

void WriteJournal::Buffer(absl::Time when, const JournalEntry& entry) {
  MutexLock lock(&mu_);
  if (buffered_lines_ >= kMaxBufferedLines) {
    ++dropped_lines_;
    return;
  }
  absl::StrAppend(&buffered_[BucketOf(when)], FormatLine(entry), "\n");
  ++buffered_lines_;
}

void WriteJournal::Record(absl::Time when, absl::string_view fingerprint, absl::string_view key,
                          uint64_t file_bytes) {
  Buffer(when, JournalEntry{std::string(fingerprint), std::string(key), file_bytes, false});
}

void WriteJournal::RecordRemoval(absl::Time when, absl::string_view fingerprint,
                                 absl::string_view key) {
  Buffer(when, JournalEntry{std::string(fingerprint), std::string(key), 0, true});
}

size_t WriteJournal::Flush() {
  MutexLock flushing(&flush_mu_);
  std::map<int64_t, std::string> lines;
  size_t dropped = 0;
  {
    MutexLock lock(&mu_);
    lines.swap(buffered_);
    buffered_lines_ = 0;
    std::swap(dropped, dropped_lines_);
  }
  size_t written = 0;
  std::string failure;
  for (const auto& [bucket, text] : lines) {
    const size_t count = static_cast<size_t>(std::count(text.begin(), text.end(), '\n'));
    const std::string dir = BucketDir(bucket);
    const std::string path = absl::StrCat(dir, "/", holder_, kLogSuffix);
    absl::Status appended = fs_->MakeDirectories(dir);
    if (appended.ok()) appended = fs_->AppendFile(path, text);
    const bool ok = appended.ok();
    if (!ok) failure = std::string(appended.message());
    if (ok) {
      written += count;
    } else {
      dropped += count;
    }
  }
  if (dropped > 0) {
    MutexLock lock(&mu_);
    const absl::Time now = clock_->Now();
    if (now - warned_ >= absl::Minutes(1)) {
      warned_ = now;
      spdlog::warn("{}: {} journal lines dropped ({}); full scans still find their files", dir_,
                   dropped, failure.empty() ? "buffer full" : failure);
    }
  }
  return written;
}

std::vector<int64_t> WriteJournal::Buckets() const {
  std::vector<int64_t> buckets;
  fs_->ListDirectory(dir_, [&](absl::string_view name, bool is_dir) {
    int64_t bucket = 0;
    if (is_dir && name.size() == kBucketNameDigits &&
        std::all_of(name.begin(), name.end(), absl::ascii_isdigit) &&
        absl::SimpleAtoi(name, &bucket)) {
      buckets.push_back(bucket);
    }
  });
  std::sort(buckets.begin(), buckets.end());
  return buckets;
}

std::vector<int64_t> WriteJournal::ClosedBuckets(absl::Time now) const {
  std::vector<int64_t> buckets = Buckets();
  buckets.erase(std::remove_if(buckets.begin(), buckets.end(),
                               [now](int64_t b) { return BucketEnd(b) + kClosedAfter > now; }),
                buckets.end());
  return buckets;
}

std::vector<std::pair<std::string, std::string>> WriteJournal::LogsOf(int64_t bucket) const {
  const std::string dir = BucketDir(bucket);
  std::vector<std::pair<std::string, std::string>> logs;
  fs_->ListDirectory(dir, [&](absl::string_view name, bool is_dir) {
    absl::string_view holder = name;
    if (!is_dir && absl::ConsumeSuffix(&holder, kLogSuffix) && !holder.empty()) {
      logs.emplace_back(std::string(holder), absl::StrCat(dir, "/", name));
    }
  });
  std::sort(logs.begin(), logs.end());
  return logs;
}

bool WriteJournal::ParseLine(absl::string_view line, JournalEntry* entry) {
  std::vector<absl::string_view> fields = absl::StrSplit(line, ' ');
  if (fields.size() != 3 || !ValidateFingerprint(fields[0]).ok()) return false;
  std::string key = KeyOfHex(fields[1]);
  if (key.empty()) return false;
  const absl::string_view size = fields[2];
  const bool removed = size == "-";
  uint64_t bytes = 0;
  if (!removed && (size.empty() || size.size() > 19 ||
                   !std::all_of(size.begin(), size.end(), absl::ascii_isdigit) ||
                   !absl::SimpleAtoi(size, &bytes))) {
    return false;
  }
  entry->fingerprint = std::string(fields[0]);
  entry->key = std::move(key);
  entry->file_bytes = bytes;
  entry->removed = removed;
  return true;
}

bool WriteJournal::ForEachEntry(int64_t bucket,
                                const std::function<bool(const JournalEntry&)>& fn) const {
  JournalEntry entry;
  for (const auto& [holder, path] : LogsOf(bucket)) {
    std::string pending;  // bytes past the last newline read
    for (uint64_t at = 0;;) {
      absl::StatusOr<std::string> chunk = fs_->ReadFileRange(path, at, kReadChunk);
      if (!chunk.ok() || chunk->empty()) break;  // Gone or unreadable: names nothing more.
      at += chunk->size();
      pending.append(*chunk);
      size_t start = 0;
      for (size_t nl = pending.find('\n'); nl != std::string::npos;
           nl = pending.find('\n', start)) {
        absl::string_view line(pending.data() + start, nl - start);
        start = nl + 1;
        // Foreign: names nothing; a removal: nothing to trim.
        if (!ParseLine(line, &entry) || entry.removed) continue;
        if (!fn(entry)) return false;
      }
      pending.erase(0, start);  // No newline yet: a write still under way or torn.
    }
  }
  return true;
}

void WriteJournal::Drop(int64_t bucket) const {
  const std::string dir = BucketDir(bucket);
  std::vector<std::string> names;
  fs_->ListDirectory(dir, [&](absl::string_view name, bool) { names.emplace_back(name); });
  for (const std::string& name : names) fs_->Remove(absl::StrCat(dir, "/", name));
  ::rmdir(dir.c_str());  // Fails harmlessly if a late flush of another daemon added a file.
}

}  // namespace kvstrata
