// ObjectTier's follower: this daemon's journal out, the other daemons' journals in
// (object_journal.h), and what they name into the index.
#include <algorithm>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "daemon/tiers/block_path.h"
#include "daemon/tiers/object/object_tier.h"
#include "spdlog/spdlog.h"

namespace kvstrata {
namespace {

// Entries learned from the journals stop being added past this (the index of a daemon that
// did not see those blocks itself); probes find the rest.
constexpr size_t kMaxIndexed = 4u << 20;

}  // namespace

bool ObjectTier::BlockOfName(absl::string_view name, std::string* fingerprint,
                             std::string* key) const {
  absl::string_view rest = name;
  if (!absl::ConsumePrefix(&rest, options_.prefix) || !absl::ConsumePrefix(&rest, "/") ||
      rest.size() < 33 || rest[32] != '/' || !absl::ConsumeSuffix(&rest, kBlockFileSuffix)) {
    return false;
  }
  const size_t slash = rest.rfind('/');
  *fingerprint = std::string(rest.substr(0, 32));
  *key = KeyOfHex(rest.substr(slash + 1));
  if (key->empty()) return false;
  absl::StatusOr<std::string> path = BlockFilePath(options_.prefix, *fingerprint, *key);
  return path.ok() && *path == name;  // The one name of that block.
}

void ObjectTier::LearnLocked(const std::vector<JournalEntry>& lines) {
  const absl::Time now = clock_->Now();
  for (const JournalEntry& line : lines) {
    absl::StatusOr<std::string> name = BlockFilePath(options_.prefix, line.fingerprint, line.key);
    if (!name.ok()) continue;
    if (line.removed) {
      GoneLocked(*name, RemovalCause::kEvicted);
      continue;
    }
    auto it = index_.find(*name);
    if (it == index_.end()) {
      if (index_.size() >= kMaxIndexed) continue;
      it = index_.try_emplace(*name).first;
      Entry& e = it->second;
      e.ns = options_.namespace_ids != nullptr ? options_.namespace_ids->IdOf(line.fingerprint) : 0;
      e.key = line.key;
      e.recorded_access = now;
      e.verified = absl::InfinitePast();
    }
    absent_until_.erase(*name);
    Entry& e = it->second;
    e.bytes = line.file_bytes;
    // Not seen by this daemon: kStale (a lookup counts it and rechecks it), unless this
    // daemon saw the object since.
    e.verified = std::max(e.verified, now - options_.presence_ttl);
  }
}

size_t ObjectTier::Follow(absl::Duration budget) {
  if (journal_ == nullptr) return 0;
  const absl::Time now = clock_->Now();
  if (absl::StatusOr<size_t> out = journal_->Flush(now); !out.ok()) {
    spdlog::warn("{}: journal: {}", options_.name, out.status().ToString());
  }
  journal_->DropOwnBefore(now - options_.followed_presence_ttl);
  std::vector<JournalEntry> lines;
  absl::StatusOr<size_t> read =
      journal_->Follow(now, budget, [&](const JournalEntry& e) { lines.push_back(e); });
  MutexLock lock(&mu_);
  LearnLocked(lines);
  if (read.ok()) {
    // Entries count as kStale up to followed_presence_ttl while the following keeps up.
    follow_ok_until_ = clock_->Now() + 3 * options_.follow_interval;
  } else {
    spdlog::warn("{}: following the journals: {}", options_.name, read.status().ToString());
  }
  return lines.size();
}

void ObjectTier::FollowLoop() {
  while (!stopping_.load()) {
    {
      std::unique_lock<std::mutex> lock(wake_mu_);
      wake_.wait_for(lock, absl::ToChronoNanoseconds(options_.follow_interval),
                     [&] { return stopping_.load(); });
    }
    if (stopping_.load()) break;
    Follow(options_.follow_interval);
  }
}

}  // namespace kvstrata
