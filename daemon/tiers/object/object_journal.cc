#include "daemon/tiers/object/object_journal.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "spdlog/spdlog.h"

namespace kvstrata {
namespace {

constexpr size_t kMsDigits = 13;

bool GoodHolder(absl::string_view holder) {
  return !holder.empty() && holder.size() <= 200 &&
         std::all_of(holder.begin(), holder.end(), [](char c) {
           return absl::ascii_isalnum(c) || c == '.' || c == '_' || c == '-';
         });
}

}  // namespace

ObjectJournal::ObjectJournal(S3Client* s3, std::string control, std::string holder,
                             absl::Duration lookback)
    : s3_(s3),
      dir_(absl::StrCat(control, "/journal/")),
      holder_(std::move(holder)),
      lookback_(lookback) {}

std::string ObjectJournal::NameAt(int64_t unix_ms) const {
  return absl::StrCat(dir_, absl::StrFormat("%013d", std::max<int64_t>(0, unix_ms)), "-", holder_);
}

bool ObjectJournal::ParseName(absl::string_view name, int64_t* unix_ms, std::string* holder) {
  if (name.size() < kMsDigits + 2 || name[kMsDigits] != '-') return false;
  const absl::string_view ms = name.substr(0, kMsDigits);
  if (!std::all_of(ms.begin(), ms.end(), absl::ascii_isdigit) || !absl::SimpleAtoi(ms, unix_ms)) {
    return false;
  }
  const absl::string_view who = name.substr(kMsDigits + 1);
  if (!GoodHolder(who)) return false;
  *holder = std::string(who);
  return true;
}

size_t ObjectJournal::ParseText(absl::string_view text, const LineFn& fn) {
  size_t lines = 0;
  JournalEntry entry;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (!WriteJournal::ParseLine(line, &entry)) continue;
    fn(entry);
    ++lines;
  }
  return lines;
}

void ObjectJournal::Record(absl::string_view fingerprint, absl::string_view key,
                           uint64_t object_bytes) {
  Buffer(JournalEntry{std::string(fingerprint), std::string(key), object_bytes, false});
}

void ObjectJournal::RecordRemoval(absl::string_view fingerprint, absl::string_view key) {
  Buffer(JournalEntry{std::string(fingerprint), std::string(key), 0, true});
}

void ObjectJournal::Buffer(const JournalEntry& entry) {
  const std::string line = WriteJournal::FormatLine(entry);
  MutexLock lock(&mu_);
  if (buffered_lines_ >= kMaxBufferedLines) {
    ++dropped_lines_;
    return;
  }
  absl::StrAppend(&buffered_, line, "\n");
  ++buffered_lines_;
}

absl::StatusOr<size_t> ObjectJournal::Flush(absl::Time now) {
  MutexLock flushing(&flush_mu_);
  std::string text;
  size_t lines = 0, dropped = 0;
  {
    MutexLock lock(&mu_);
    text.swap(buffered_);
    std::swap(lines, buffered_lines_);
    std::swap(dropped, dropped_lines_);
  }
  if (dropped > 0) {
    spdlog::warn("object journal: {} lines dropped (flushes failing): other daemons probe those",
                 dropped);
  }
  if (lines == 0) return 0;
  // Names strictly increase (two flushes within a millisecond).
  const int64_t ms = std::max(absl::ToUnixMillis(now), last_name_ms_ + 1);
  S3Request put;
  put.method = S3Request::Method::kPut;
  put.key = NameAt(ms);
  put.body = {text};
  s3_->Run(put);
  if (!put.ok()) {
    MutexLock lock(&mu_);  // Kept for the next flush, ahead of what came since.
    if (buffered_lines_ + lines <= kMaxBufferedLines) {
      buffered_.insert(0, text);
      buffered_lines_ += lines;
    } else {
      dropped_lines_ += lines;
    }
    return s3_->Failure(put);
  }
  last_name_ms_ = ms;
  own_.emplace_back(ms, put.key);
  return lines;
}

void ObjectJournal::DropOwnBefore(absl::Time cutoff) {
  std::vector<std::string> doomed;
  {
    MutexLock lock(&flush_mu_);
    while (!own_.empty() && own_.front().first < absl::ToUnixMillis(cutoff)) {
      doomed.push_back(std::move(own_.front().second));
      own_.pop_front();
    }
  }
  Delete(doomed);
}

void ObjectJournal::DropListedBefore(const std::vector<S3Object>& listed, absl::Time cutoff) {
  std::vector<std::string> doomed;
  for (const S3Object& o : listed) {
    if (absl::StartsWith(o.key, dir_) && o.last_modified < cutoff) doomed.push_back(o.key);
  }
  Delete(doomed);
}

void ObjectJournal::Delete(const std::vector<std::string>& doomed) {
  std::vector<S3Request> deletes(doomed.size());
  std::vector<S3Request*> batch;
  for (size_t i = 0; i < doomed.size(); ++i) {
    deletes[i].method = S3Request::Method::kDelete;
    deletes[i].key = doomed[i];
    batch.push_back(&deletes[i]);
  }
  s3_->Run(batch);  // One that fails is deleted by the trimmer once it is old enough.
}

absl::StatusOr<size_t> ObjectJournal::Follow(absl::Time now, absl::Duration budget,
                                             const LineFn& fn) {
  const auto deadline = std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(budget);
  MutexLock lock(&follow_mu_);
  const int64_t now_ms = absl::ToUnixMillis(now);
  if (cursor_ms_ < 0) cursor_ms_ = now_ms - absl::ToInt64Milliseconds(lookback_);
  const int64_t from_ms = cursor_ms_ - absl::ToInt64Milliseconds(kLag);
  absl::StatusOr<std::vector<S3Object>> listed =
      s3_->List(dir_, absl::StrCat(dir_, absl::StrFormat("%013d", std::max<int64_t>(0, from_ms))));
  if (!listed.ok()) return listed.status();
  int64_t newest = cursor_ms_;
  for (const S3Object& o : *listed) {
    int64_t ms = 0;
    std::string holder;
    // (A server that ignores start-after lists the older ones too.)
    if (!ParseName(absl::string_view(o.key).substr(dir_.size()), &ms, &holder) || ms < from_ms) {
      continue;
    }
    newest = std::max(newest, std::min(ms, now_ms));  // A clock ahead does not skip the rest.
    if (holder == holder_ || read_.contains(o.key)) continue;
    pending_.insert(o.key);
  }
  cursor_ms_ = newest;
  // What the next listing no longer returns is forgotten; so is a journal object that could
  // not be read for a whole lookback.
  const int64_t keep_from = cursor_ms_ - absl::ToInt64Milliseconds(kLag);
  const int64_t give_up = now_ms - absl::ToInt64Milliseconds(lookback_);
  for (auto it = read_.begin(); it != read_.end();) {
    it = it->second < keep_from ? read_.erase(it) : std::next(it);
  }
  size_t lines = 0;
  while (!pending_.empty() && std::chrono::steady_clock::now() < deadline) {
    std::vector<S3Request> gets(std::min(kReadBatch, pending_.size()));
    std::vector<S3Request*> batch;
    auto it = pending_.begin();
    for (S3Request& g : gets) {
      g.key = *it++;
      g.keep_body = true;
      batch.push_back(&g);
    }
    s3_->Run(batch);
    bool unread = false;
    for (const S3Request& g : gets) {  // In name order: oldest first.
      int64_t ms = 0;
      std::string holder;
      ParseName(absl::string_view(g.key).substr(dir_.size()), &ms, &holder);
      if (g.ok()) lines += ParseText(g.text, fn);
      if (g.ok() || g.not_found() || ms < give_up) {
        pending_.erase(g.key);
        read_[g.key] = ms;
      } else {
        unread = true;
      }
    }
    if (unread) break;  // No answer, or refused: the next Follow tries again.
  }
  return lines;
}

}  // namespace kvstrata
