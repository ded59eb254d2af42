#include "daemon/tiers/journal_follower.h"

#include <algorithm>
#include <vector>

#include "absl/strings/string_view.h"

namespace kvstrata {
namespace {

constexpr size_t kReadChunk = 256 * 1024;

}  // namespace

JournalFollower::JournalFollower(const WriteJournal* journal, absl::Duration lookback)
    : journal_(journal), lookback_(lookback) {}

size_t JournalFollower::Poll(absl::Time now, absl::Duration budget, const LineFn& fn) {
  // An infinite budget: a deadline far enough (a century) not to overflow the clock.
  const Deadline deadline =
      std::chrono::steady_clock::now() +
      absl::ToChronoNanoseconds(std::min(budget, absl::Hours(24 * 365 * 100)));
  if (!started_) {
    started_ = true;
    oldest_ = WriteJournal::BucketOf(now - lookback_);
  }
  const std::vector<int64_t> buckets = journal_->Buckets();
  // Forget what the trimmer dropped.
  for (auto it = offsets_.begin(); it != offsets_.end();) {
    it = std::binary_search(buckets.begin(), buckets.end(), it->first) ? std::next(it)
                                                                       : offsets_.erase(it);
  }
  for (auto it = done_.begin(); it != done_.end();) {
    it = std::binary_search(buckets.begin(), buckets.end(), *it) ? std::next(it) : done_.erase(it);
  }
  size_t lines = 0;
  for (int64_t bucket : buckets) {
    if (bucket < oldest_ || done_.contains(bucket)) continue;
    if (std::chrono::steady_clock::now() >= deadline) return lines;
    const bool closed = WriteJournal::BucketEnd(bucket) + WriteJournal::kClosedAfter <= now;
    std::map<std::string, uint64_t>& read = offsets_[bucket];
    bool whole = true;
    for (const auto& [holder, path] : journal_->LogsOf(bucket)) {
      if (holder == journal_->holder()) continue;
      if (!ReadNewLines(path, holder, &read[holder], bucket, deadline, fn, &lines)) whole = false;
      if (!whole) break;
    }
    if (closed && whole) {
      done_.insert(bucket);
      offsets_.erase(bucket);
    }
  }
  return lines;
}

bool JournalFollower::ReadNewLines(const std::string& path, absl::string_view holder,
                                   uint64_t* offset, int64_t bucket, Deadline deadline,
                                   const LineFn& fn, size_t* lines) {
  BlockFileSystem* files = journal_->files();
  std::string pending;  // bytes past the last newline seen
  JournalEntry entry;
  uint64_t at = *offset;
  while (true) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    absl::StatusOr<std::string> chunk = files->ReadFileRange(path, at, kReadChunk);
    // Dropped meanwhile: nothing left to read. Unreadable: not read whole.
    if (!chunk.ok()) return absl::IsNotFound(chunk.status());
    if (chunk->empty()) return true;
    at += chunk->size();
    pending.append(*chunk);
    size_t start = 0;
    for (size_t nl = pending.find('\n'); nl != std::string::npos; nl = pending.find('\n', start)) {
      absl::string_view line(pending.data() + start, nl - start);
      if (WriteJournal::ParseLine(line, &entry)) {
        fn(entry, holder, bucket);
        ++*lines;
      }
      start = nl + 1;
    }
    *offset += start;  // whole lines only
    pending.erase(0, start);
    if (pending.size() > kMaxLineBytes) {  // No journal writes such a line: skip it.
      *offset += pending.size();
      pending.clear();
    }
  }
}

}  // namespace kvstrata
