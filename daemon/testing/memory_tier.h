// MemoryTier: a BlockTier (daemon/tiers/block_tier.h) held in a hash map, for tests of the
// code above the tiers (TierManager, the store path) and as the reference the contract
// suite checks every real tier against. Knows every block it holds (Cached never says
// kUnknown). `capacity_blocks` (0 = unbounded) refuses writes past it; FailWrites/FailReads
// make every later call fail, like a broken disk. The front (BlockTier) checks and counts;
// this keeps write_errors and refused_writes. Thread-safe (one mutex). Header-only.
#ifndef KVSTRATA_DAEMON_TESTING_MEMORY_TIER_H_
#define KVSTRATA_DAEMON_TESTING_MEMORY_TIER_H_

#include <cstring>
#include <optional>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "daemon/common/mutex.h"
#include "daemon/tiers/block_tier.h"

namespace kvstrata {

class MemoryTier final : public BlockTier {
 public:
  explicit MemoryTier(Tier level, size_t capacity_blocks = 0)
      : level_(level), capacity_blocks_(capacity_blocks) {}

  void FailWrites(bool fail) {
    MutexLock lock(&mu_);
    fail_writes_ = fail;
  }
  void FailReads(bool fail) {
    MutexLock lock(&mu_);
    fail_reads_ = fail;
  }

  Tier level() const override { return level_; }

 protected:
  Presence CachedImpl(const TierNamespace& ns, absl::string_view key) const override {
    MutexLock lock(&mu_);
    return Find(ns.fingerprint, key) != nullptr ? Presence::kPresent : Presence::kAbsent;
  }
  bool ProbeImpl(const TierNamespace& ns, absl::string_view key) override {
    return CachedImpl(ns, key) == Presence::kPresent;
  }
  bool ReadImpl(const TierNamespace& ns, absl::string_view key, absl::Span<char> dest) override {
    MutexLock lock(&mu_);
    const std::string* block = Find(ns.fingerprint, key);
    if (fail_reads_ || block == nullptr || block->size() != dest.size()) return false;
    std::memcpy(dest.data(), block->data(), dest.size());
    return true;
  }
  absl::StatusOr<WriteOutcome> WriteImpl(const TierNamespace& ns, absl::string_view key,
                                         absl::string_view payload) override {
    MutexLock lock(&mu_);
    if (Find(ns.fingerprint, key) != nullptr) return WriteOutcome::kAlreadyPresent;
    if (fail_writes_) {
      ++stats_.write_errors;
      return absl::UnavailableError("memory tier: writes fail");
    }
    if (capacity_blocks_ > 0 && CountLocked() >= capacity_blocks_) {
      ++stats_.refused_writes;
      return absl::ResourceExhaustedError("memory tier: full");
    }
    blocks_[ns.fingerprint].emplace(std::string(key), std::string(payload));
    return WriteOutcome::kWritten;
  }
  bool RemoveImpl(const TierNamespace& ns, absl::string_view key) override {
    MutexLock lock(&mu_);
    auto it = blocks_.find(ns.fingerprint);
    return it != blocks_.end() && it->second.erase(key) > 0;
  }
  size_t ClearImpl(std::optional<absl::string_view> fingerprint) override {
    MutexLock lock(&mu_);
    if (!fingerprint.has_value()) {
      size_t removed = CountLocked();
      blocks_.clear();
      return removed;
    }
    auto it = blocks_.find(*fingerprint);
    if (it == blocks_.end()) return 0;
    size_t removed = it->second.size();
    blocks_.erase(it);
    return removed;
  }
  TierStats StatsImpl() const override {
    MutexLock lock(&mu_);
    TierStats s = stats_;
    s.blocks = CountLocked();
    for (const auto& [fingerprint, keys] : blocks_) {
      for (const auto& [key, bytes] : keys) s.used_bytes += bytes.size();
    }
    s.warm = true;
    return s;
  }

 private:
  const std::string* Find(absl::string_view fingerprint, absl::string_view key) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto ns = blocks_.find(fingerprint);
    if (ns == blocks_.end()) return nullptr;
    auto it = ns->second.find(key);
    return it == ns->second.end() ? nullptr : &it->second;
  }
  size_t CountLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    size_t n = 0;
    for (const auto& [fingerprint, keys] : blocks_) n += keys.size();
    return n;
  }

  const Tier level_;
  const size_t capacity_blocks_;
  mutable Mutex mu_;
  // fingerprint -> key -> payload
  absl::flat_hash_map<std::string, absl::flat_hash_map<std::string, std::string>> blocks_
      ABSL_GUARDED_BY(mu_);
  TierStats stats_ ABSL_GUARDED_BY(mu_);
  bool fail_writes_ ABSL_GUARDED_BY(mu_) = false;
  bool fail_reads_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_TESTING_MEMORY_TIER_H_
