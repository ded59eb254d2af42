#include "daemon/tiering/lower_lookup.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <limits>
#include <mutex>
#include <string>

#include "absl/strings/str_cat.h"

namespace kvstrata {
namespace {

constexpr size_t kMaxProbedKeys = 1024;
// Probes are latency-bound stat(2)s (1-16 ms each over a FUSE mount such as GlusterFS), so
// a chain's keys are probed this many at a time.
constexpr size_t kProbeThreads = 16;

absl::string_view Raw(std::string_view key) { return absl::string_view(key.data(), key.size()); }

}  // namespace

LowerLookup::LowerLookup(TierStack* stack)
    : stack_(stack), prober_(std::make_unique<IoPool>(kProbeThreads)) {}

std::vector<Tier> LowerLookup::Prefix(const TierNamespace& tn, Keys keys,
                                      const std::vector<bool>& in_l1, bool trust_stale) {
  std::vector<Tier> found;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i < in_l1.size() && in_l1[i]) {
      found.push_back(Tier::kL1);
      continue;
    }
    bool unknown = false;
    std::optional<Tier> tier = stack_->Where(tn, Raw(keys[i]), &unknown, trust_stale);
    if (!tier.has_value()) break;
    found.push_back(*tier);
  }
  return found;
}

bool LowerLookup::SyncPresenceCheck() const {
  for (const auto& lower : stack_->tiers()) {
    if (lower->options.presence_check_sync) return true;
  }
  return false;
}

bool LowerLookup::ProbeKey(const TierNamespace& tn, absl::string_view key) {
  bool unknown = false;
  bool present = stack_->Where(tn, key, &unknown).has_value();
  for (size_t t = 0; !present && t < stack_->tiers().size(); ++t) {
    BlockTier& storage = *stack_->tiers()[t]->storage;
    const BlockTier::Presence cached = storage.Cached(tn, key);
    present = (cached == BlockTier::Presence::kUnknown || cached == BlockTier::Presence::kStale) &&
              storage.Probe(tn, key);
  }
  return present;
}

void LowerLookup::RecheckStale(const TierNamespace& tn, Keys keys) {
  for (size_t i = 0; i < keys.size() && i < kMaxProbedKeys; ++i) {
    const absl::string_view key = Raw(keys[i]);
    bool stale = false;
    for (const auto& lower : stack_->tiers()) {
      stale = stale || lower->storage->Cached(tn, key) == BlockTier::Presence::kStale;
    }
    if (!stale) continue;
    std::string id = absl::StrCat(tn.fingerprint, "/", key);
    {
      MutexLock lock(&recheck_mu_);
      if (rechecking_.size() >= kMaxRechecks || !rechecking_.insert(id).second) continue;
    }
    prober_->Submit(IoPool::Priority::kBackground,
                    [this, tn, id = std::move(id), k = std::string(key)]() mutable {
                      ProbeKey(tn, k);
                      MutexLock lock(&recheck_mu_);
                      rechecking_.erase(id);
                    });
  }
}

std::vector<Tier> LowerLookup::FindChain(const TierNamespace& tn, Keys keys,
                                         const std::vector<bool>& in_l1) {
  // presence_check "async" (the default): a stale entry counts as its index says and is
  // checked after this lookup answered; "sync": checked by the probes below.
  const bool sync = SyncPresenceCheck();
  std::vector<Tier> found = Prefix(tn, keys, in_l1, /*trust_stale=*/!sync);
  if (!sync) RecheckStale(tn, keys.first(found.size()));
  if (found.size() < keys.size()) {
    bool unknown = false;
    stack_->Where(tn, Raw(keys[found.size()]), &unknown);
    if (unknown) {
      absl::Duration timeout = absl::ZeroDuration();
      for (const auto& lower : stack_->tiers()) {
        timeout = std::max(timeout, lower->options.probe_timeout);
      }
      Probe(tn, keys.subspan(found.size()), timeout);
      // L1's answer stands: a probe only adds disk hits. A shared tier's entry whose probe
      // did not answer in time counts as its index says (kStale).
      found = Prefix(tn, keys, in_l1, /*trust_stale=*/true);
    }
  }
  return found;
}

void LowerLookup::Probe(const TierNamespace& tn, Keys keys, absl::Duration timeout,
                        Probing probing) {
  if (keys.empty() || timeout <= absl::ZeroDuration()) return;
  // One probe task per key, run in parallel; in a chain a key past the first absent one is
  // skipped (the chain ends there), so a miss costs at most kProbeThreads wasted stat(2)s.
  struct Chain {
    Chain(const TierNamespace& n, size_t count, bool c) : tn(n), chain(c), pending(count) {}
    const TierNamespace tn;
    const bool chain;  // a key past the first absent one is not probed
    std::atomic<size_t> first_absent{std::numeric_limits<size_t>::max()};
    std::mutex mu;
    std::condition_variable cv;
    size_t pending;  // by mu
  };
  const size_t count = std::min(keys.size(), kMaxProbedKeys);
  auto chain = std::make_shared<Chain>(tn, count, probing == Probing::kChain);
  for (size_t i = 0; i < count; ++i) {
    prober_->Submit(IoPool::Priority::kUrgent, [this, chain, i, key = std::string(keys[i])] {
      if (i < chain->first_absent.load(std::memory_order_acquire)) {
        const bool present = ProbeKey(chain->tn, key);
        size_t seen = chain->first_absent.load(std::memory_order_acquire);
        while (!present && chain->chain && i < seen &&
               !chain->first_absent.compare_exchange_weak(seen, i, std::memory_order_acq_rel)) {
        }
      }
      std::lock_guard<std::mutex> lock(chain->mu);
      if (--chain->pending == 0) chain->cv.notify_all();
    });
  }
  std::unique_lock<std::mutex> lock(chain->mu);
  chain->cv.wait_for(lock, absl::ToChronoNanoseconds(timeout), [&] { return chain->pending == 0; });
}

void LowerLookup::Peek(const TierNamespace& tn, Keys keys,
                       std::vector<std::optional<Tier>>* where) {
  // The keys no index can tell about, probed tier by tier (fastest first) in one batch
  // each; a key found in one tier is not probed in the slower ones.
  std::vector<size_t> unknown_at;
  std::vector<absl::string_view> unknown;
  for (size_t i = 0; i < keys.size() && i < where->size(); ++i) {
    if ((*where)[i].has_value()) continue;
    bool unknown_here = false;
    (*where)[i] = stack_->Where(tn, Raw(keys[i]), &unknown_here);
    if ((*where)[i].has_value() || !unknown_here) continue;
    unknown_at.push_back(i);
    unknown.push_back(Raw(keys[i]));
  }
  for (const auto& lower : stack_->tiers()) {
    if (unknown.empty()) break;
    absl::StatusOr<std::vector<bool>> present = lower->storage->ProbeMany(tn, unknown);
    if (!present.ok()) continue;  // A bad key: logged and counted by the tier.
    size_t kept = 0;
    for (size_t j = 0; j < unknown.size(); ++j) {
      if ((*present)[j]) {
        (*where)[unknown_at[j]] = lower->level();
      } else {
        unknown_at[kept] = unknown_at[j];
        unknown[kept++] = unknown[j];
      }
    }
    unknown_at.resize(kept);
    unknown.resize(kept);
  }
}

}  // namespace kvstrata
