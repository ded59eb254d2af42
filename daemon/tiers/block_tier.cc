#include "daemon/tiers/block_tier.h"

#include <chrono>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/tiers/block_path.h"
#include "spdlog/spdlog.h"

namespace kvstrata {
namespace {

constexpr int64_t kRejectLogIntervalNs = 10'000'000'000;  // 10 s

int64_t SteadyNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

absl::Duration Since(int64_t start_ns) { return absl::Nanoseconds(SteadyNanos() - start_ns); }

absl::Status CheckNamespace(const TierNamespace& ns) {
  if (ns.fingerprint.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("namespace ", ns.id, " has no fingerprint (a tier names blocks by it)"));
  }
  if (absl::Status s = ValidateFingerprint(ns.fingerprint); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("namespace ", ns.id, ": ", s.message()));
  }
  return absl::OkStatus();
}

absl::Status CheckKey(const TierNamespace& ns, absl::string_view key) {
  if (absl::Status s = CheckNamespace(ns); !s.ok()) return s;
  return ValidateBlockKey(key);
}

// `what` ("dest", "payload") of `bytes` bytes for a block of `ns`.
absl::Status CheckBlock(const TierNamespace& ns, absl::string_view key, absl::string_view what,
                        size_t bytes) {
  if (absl::Status s = CheckKey(ns, key); !s.ok()) return s;
  if (ns.payload_bytes == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("namespace ", ns.fingerprint, " has no payload size"));
  }
  if (bytes != ns.payload_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a ", what, " of ", bytes, " bytes where the namespace's blocks have ", ns.payload_bytes));
  }
  return absl::OkStatus();
}

// The batch's key i failed `error`.
absl::Status AtKey(size_t i, const absl::Status& error) {
  return absl::InvalidArgumentError(absl::StrCat("key ", i, ": ", error.message()));
}

// A batch of blocks: one `what` ("dest", "payload") per key, each checked as CheckBlock does.
template <typename Blocks>
absl::Status CheckBatch(const TierNamespace& ns, absl::Span<const absl::string_view> keys,
                        const Blocks& blocks, absl::string_view what) {
  if (blocks.size() != keys.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(keys.size(), " keys and ", blocks.size(), " ", what, "s"));
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    if (absl::Status s = CheckBlock(ns, keys[i], what, blocks[i].size()); !s.ok()) {
      return AtKey(i, s);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::string_view TierStateName(TierState state) {
  switch (state) {
    case TierState::kOk:
      return "ok";
    case TierState::kDegraded:
      return "degraded";
    case TierState::kReadOnly:
      return "read-only";
  }
  return "unknown";
}

absl::Status BlockTier::Reject(absl::string_view call, absl::Status error) const {
  rejected_.fetch_add(1, std::memory_order_relaxed);
  const int64_t now = SteadyNanos();
  int64_t last = last_reject_log_ns_.load(std::memory_order_relaxed);
  if ((last == 0 || now - last >= kRejectLogIntervalNs) &&
      last_reject_log_ns_.compare_exchange_strong(last, now, std::memory_order_relaxed)) {
    spdlog::warn("{}: {} refused: {}", label(), std::string(call), std::string(error.message()));
  }
  return error;
}

void BlockTier::CountRead(bool hit, uint64_t bytes, absl::Duration took) const {
  if (!hit) {
    misses_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  hits_.fetch_add(1, std::memory_order_relaxed);
  read_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  MetricsSink* metrics = metrics_.load(std::memory_order_acquire);
  if (metrics != nullptr) metrics->RecordTransfer(level(), CopyDirection::kUp, bytes, took);
}

void BlockTier::CountWrite(const absl::StatusOr<WriteOutcome>& outcome, uint64_t bytes,
                           absl::Duration took) const {
  if (!outcome.ok()) return;
  if (*outcome == WriteOutcome::kWritten) {
    writes_.fetch_add(1, std::memory_order_relaxed);
    write_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  }
  MetricsSink* metrics = metrics_.load(std::memory_order_acquire);
  if (metrics != nullptr) metrics->RecordTransfer(level(), CopyDirection::kDown, bytes, took);
}

BlockTier::Presence BlockTier::Cached(const TierNamespace& ns, absl::string_view key) const {
  if (absl::Status s = CheckKey(ns, key); !s.ok()) {
    (void)Reject("Cached", std::move(s));
    return Presence::kAbsent;
  }
  return CachedImpl(ns, key);
}

bool BlockTier::Probe(const TierNamespace& ns, absl::string_view key) {
  if (absl::Status s = CheckKey(ns, key); !s.ok()) {
    (void)Reject("Probe", std::move(s));
    return false;
  }
  return ProbeImpl(ns, key);
}

bool BlockTier::Read(const TierNamespace& ns, absl::string_view key, absl::Span<char> dest) {
  if (absl::Status s = CheckBlock(ns, key, "dest", dest.size()); !s.ok()) {
    (void)Reject("Read", std::move(s));
    return false;
  }
  const int64_t start = SteadyNanos();
  const bool hit = ReadImpl(ns, key, dest);
  CountRead(hit, dest.size(), Since(start));
  return hit;
}

absl::Status BlockTier::Write(const TierNamespace& ns, absl::string_view key,
                              absl::string_view payload) {
  if (absl::Status s = CheckBlock(ns, key, "payload", payload.size()); !s.ok()) {
    return Reject("Write", std::move(s));
  }
  const int64_t start = SteadyNanos();
  absl::StatusOr<WriteOutcome> outcome = WriteImpl(ns, key, payload);
  CountWrite(outcome, payload.size(), Since(start));
  return outcome.status();
}

bool BlockTier::Remove(const TierNamespace& ns, absl::string_view key) {
  if (absl::Status s = CheckKey(ns, key); !s.ok()) {
    (void)Reject("Remove", std::move(s));
    return false;
  }
  return RemoveImpl(ns, key);
}

size_t BlockTier::Clear(std::optional<absl::string_view> fingerprint) {
  if (fingerprint.has_value()) {
    if (absl::Status s = ValidateFingerprint(*fingerprint); !s.ok()) {
      (void)Reject("Clear", std::move(s));
      return 0;
    }
  }
  return ClearImpl(fingerprint);
}

TierStats BlockTier::Stats() const {
  TierStats stats = StatsImpl();
  stats.hits = hits_.load(std::memory_order_relaxed);
  stats.misses = misses_.load(std::memory_order_relaxed);
  stats.read_bytes = read_bytes_.load(std::memory_order_relaxed);
  stats.writes = writes_.load(std::memory_order_relaxed);
  stats.write_bytes = write_bytes_.load(std::memory_order_relaxed);
  stats.rejected_calls = rejected_.load(std::memory_order_relaxed);
  return stats;
}

absl::StatusOr<std::vector<bool>> BlockTier::ReadMany(const TierNamespace& ns,
                                                      absl::Span<const absl::string_view> keys,
                                                      absl::Span<const absl::Span<char>> dests) {
  if (absl::Status s = CheckBatch(ns, keys, dests, "dest"); !s.ok()) {
    return Reject("ReadMany", std::move(s));
  }
  if (keys.empty()) return std::vector<bool>();
  const int64_t start = SteadyNanos();
  std::vector<bool> hits = ReadManyImpl(ns, keys, dests);
  hits.resize(keys.size(), false);  // A kind that answered too few: the rest missed.
  const absl::Duration each = Since(start) / static_cast<int64_t>(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) CountRead(hits[i], dests[i].size(), each);
  return hits;
}

absl::StatusOr<std::vector<absl::Status>> BlockTier::WriteMany(
    const TierNamespace& ns, absl::Span<const absl::string_view> keys,
    absl::Span<const absl::string_view> payloads) {
  if (absl::Status s = CheckBatch(ns, keys, payloads, "payload"); !s.ok()) {
    return Reject("WriteMany", std::move(s));
  }
  std::vector<absl::Status> answers;
  if (keys.empty()) return answers;
  const int64_t start = SteadyNanos();
  std::vector<absl::StatusOr<WriteOutcome>> outcomes = WriteManyImpl(ns, keys, payloads);
  // Keys an Impl gave no answer for (not a resize(n, value): GCC's -O3 warns that the
  // copied StatusOr may be used uninitialized).
  while (outcomes.size() < keys.size()) {
    outcomes.emplace_back(absl::InternalError("the tier gave no answer for this key"));
  }
  const absl::Duration each = Since(start) / static_cast<int64_t>(keys.size());
  answers.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    CountWrite(outcomes[i], payloads[i].size(), each);
    answers.push_back(outcomes[i].status());
  }
  return answers;
}

absl::StatusOr<std::vector<bool>> BlockTier::ProbeMany(const TierNamespace& ns,
                                                       absl::Span<const absl::string_view> keys) {
  for (size_t i = 0; i < keys.size(); ++i) {
    if (absl::Status s = CheckKey(ns, keys[i]); !s.ok()) return Reject("ProbeMany", AtKey(i, s));
  }
  if (keys.empty()) return std::vector<bool>();
  std::vector<bool> present = ProbeManyImpl(ns, keys);
  present.resize(keys.size(), false);
  return present;
}

std::vector<bool> BlockTier::ReadManyImpl(const TierNamespace& ns,
                                          absl::Span<const absl::string_view> keys,
                                          absl::Span<const absl::Span<char>> dests) {
  std::vector<bool> hits(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) hits[i] = ReadImpl(ns, keys[i], dests[i]);
  return hits;
}

std::vector<absl::StatusOr<BlockTier::WriteOutcome>> BlockTier::WriteManyImpl(
    const TierNamespace& ns, absl::Span<const absl::string_view> keys,
    absl::Span<const absl::string_view> payloads) {
  std::vector<absl::StatusOr<WriteOutcome>> outcomes;
  outcomes.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) outcomes.push_back(WriteImpl(ns, keys[i], payloads[i]));
  return outcomes;
}

std::vector<bool> BlockTier::ProbeManyImpl(const TierNamespace& ns,
                                           absl::Span<const absl::string_view> keys) {
  std::vector<bool> present(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) present[i] = ProbeImpl(ns, keys[i]);
  return present;
}

}  // namespace kvstrata
