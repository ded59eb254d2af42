// TierManager: set-up, the L1 listener, lookups and admin. Promotion is in
// tier_manager_promote.cc, writing down in tier_manager_write.cc.
#include "daemon/tiering/tier_manager.h"

#include <atomic>
#include <limits>
#include <utility>

namespace kvstrata {
namespace {

constexpr size_t kMaxProbedKeys = 1024;
// Probes are latency-bound stat(2)s (1-16 ms each over a FUSE mount such as GlusterFS), so
// a chain's keys are probed this many at a time.
constexpr size_t kProbeThreads = 16;

}  // namespace

TierManager::TierManager(NamespaceRegistry* namespaces, absl::Duration promotion_wait)
    : namespaces_(namespaces),
      promotion_wait_(promotion_wait),
      prober_(std::make_unique<IoPool>(kProbeThreads)) {}

TierManager::~TierManager() { Stop(); }

void TierManager::Stop() {
  // Stopped, not destroyed: a task still running on one pool may submit to another
  // (a promotion's commit queues a write) while that one stops.
  stopped_.store(true);
  if (prober_ != nullptr) prober_->Stop();
  for (auto& lower : tiers_) {
    if (lower->io != nullptr) lower->io->Stop();
  }
}

void TierManager::AddTier(std::unique_ptr<BlockTier> storage, LowerTierOptions options) {
  auto lower = std::make_unique<Lower>();
  lower->io = std::make_unique<IoPool>(options.io_threads);
  lower->storage = std::move(storage);
  lower->options = options;
  counts_hits_ = counts_hits_ || options.write_down_min_hits > 0;
  tiers_.push_back(std::move(lower));
}

void TierManager::AttachL1(PartitionedCache* cache, char* region_base) {
  cache_ = cache;
  region_ = region_base;
}

TierManager::Lower* TierManager::TierOf(Tier tier) const {
  for (const auto& lower : tiers_) {
    if (lower->storage->level() == tier) return lower.get();
  }
  return nullptr;
}

std::optional<TierNamespace> TierManager::NamespaceOf(NamespaceId ns) {
  {
    MutexLock lock(&ns_mu_);
    auto it = ns_cache_.find(ns);
    if (it != ns_cache_.end()) return it->second;
  }
  std::optional<NamespaceInfo> info = namespaces_->Find(ns);
  if (!info.has_value()) return std::nullopt;
  TierNamespace tn{info->fingerprint, info->spec, info->bytes_per_block};
  MutexLock lock(&ns_mu_);
  ns_cache_.emplace(ns, tn);
  return tn;
}

void TierManager::OnLowerTierChange(Tier tier, absl::string_view fingerprint, absl::string_view key,
                                    bool stored, RemovalCause cause) {
  if (next_ == nullptr) return;
  NamespaceId ns = 0;
  {
    MutexLock lock(&ns_mu_);
    auto it = ns_by_fingerprint_.find(fingerprint);
    if (it != ns_by_fingerprint_.end()) ns = it->second;
  }
  if (ns == 0) {
    std::optional<NamespaceInfo> info = namespaces_->FindByFingerprint(std::string(fingerprint));
    if (!info.has_value()) return;  // Only blocks of registered namespaces are announced.
    ns = info->id;
    MutexLock lock(&ns_mu_);
    ns_by_fingerprint_.emplace(std::string(fingerprint), ns);
  }
  absl::StatusOr<BlockKey> block = BlockKey::Make(ns, std::string_view(key.data(), key.size()));
  if (!block.ok()) return;
  if (stored) {
    next_->OnStored(ns, *block, tier);
  } else {
    next_->OnRemoved(ns, *block, tier, cause);
  }
}

void TierManager::OnStored(NamespaceId ns, const BlockKey& key, Tier tier) {
  if (tier == Tier::kL1) {
    for (auto& lower : tiers_) {
      if (!lower->options.write_back && lower->options.write_down_min_hits == 0) {
        QueueWrite(*lower, ns, key, "");
      }
    }
  }
  if (next_ != nullptr) next_->OnStored(ns, key, tier);
}

void TierManager::OnRemoved(NamespaceId ns, const BlockKey& key, Tier tier, RemovalCause cause) {
  if (next_ != nullptr) next_->OnRemoved(ns, key, tier, cause);
}

void TierManager::OnEvicting(NamespaceId ns, const BlockKey& key, uint64_t offset,
                             uint64_t length) {
  for (auto& lower : tiers_) {
    if (!lower->options.write_back) {
      MutexLock lock(&lower->pending_mu);
      auto it = lower->pending.find(key);
      if (it != lower->pending.end()) it->second->copy.assign(region_ + offset, length);
      continue;
    }
    if (lower->options.write_down_min_hits > 0) {
      MutexLock lock(&hits_mu_);
      auto it = l1_hits_.find(key);
      if (it == l1_hits_.end() || it->second < lower->options.write_down_min_hits) continue;
    }
    QueueWrite(*lower, ns, key, std::string(region_ + offset, length));
  }
  if (next_ != nullptr) next_->OnEvicting(ns, key, offset, length);
}

std::optional<Tier> TierManager::CachedTier(const TierNamespace& tn, absl::string_view key,
                                            bool* unknown) {
  for (const auto& lower : tiers_) {
    switch (lower->storage->Cached(tn.fingerprint, key)) {
      case BlockTier::Presence::kPresent:
        return lower->storage->level();
      case BlockTier::Presence::kUnknown:
        *unknown = true;
        break;
      case BlockTier::Presence::kAbsent:
        break;
    }
  }
  return std::nullopt;
}

std::vector<Tier> TierManager::LowerPrefix(NamespaceId ns, const TierNamespace& tn,
                                           absl::Span<const std::string_view> keys) {
  absl::StatusOr<std::vector<std::optional<Tier>>> in_l1 = cache_->Peek(ns, keys);
  std::vector<Tier> found;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (in_l1.ok() && (*in_l1)[i].has_value()) {
      found.push_back(Tier::kL1);
      continue;
    }
    bool unknown = false;
    std::optional<Tier> tier =
        CachedTier(tn, absl::string_view(keys[i].data(), keys[i].size()), &unknown);
    if (!tier.has_value()) break;
    found.push_back(*tier);
  }
  return found;
}

void TierManager::ProbeChain(const TierNamespace& tn, absl::Span<const std::string_view> keys,
                             absl::Duration timeout) {
  if (keys.empty() || timeout <= absl::ZeroDuration() || prober_ == nullptr) return;
  // One probe task per key, run in parallel; a key past the first absent one is skipped
  // (the chain ends there), so a miss costs at most kProbeThreads wasted stat(2)s.
  struct Chain {
    explicit Chain(const TierNamespace& n, size_t count) : tn(n), pending(count) {}
    const TierNamespace tn;
    std::atomic<size_t> first_absent{std::numeric_limits<size_t>::max()};
    std::mutex mu;
    std::condition_variable cv;
    size_t pending;  // by mu
  };
  const size_t count = std::min(keys.size(), kMaxProbedKeys);
  auto chain = std::make_shared<Chain>(tn, count);
  for (size_t i = 0; i < count; ++i) {
    prober_->Submit(IoPool::Priority::kUrgent, [this, chain, i, key = std::string(keys[i])] {
      if (i < chain->first_absent.load(std::memory_order_acquire)) {
        bool unknown = false;
        bool present = CachedTier(chain->tn, key, &unknown).has_value();
        for (size_t t = 0; !present && t < tiers_.size(); ++t) {
          BlockTier& storage = *tiers_[t]->storage;
          present = storage.Cached(chain->tn.fingerprint, key) == BlockTier::Presence::kUnknown &&
                    storage.Probe(chain->tn.fingerprint, key);
        }
        size_t seen = chain->first_absent.load(std::memory_order_acquire);
        while (!present && i < seen &&
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

void TierManager::ExtendLookup(SessionId session, NamespaceId ns,
                               absl::Span<const std::string_view> keys,
                               std::optional<absl::Duration> lease_ttl, LookupResult* result) {
  if (tiers_.empty() || cache_ == nullptr) return;
  if (counts_hits_) {
    for (size_t i = 0; i < result->hits; ++i) {
      absl::StatusOr<BlockKey> key = BlockKey::Make(ns, keys[i]);
      if (key.ok()) CountHit(ns, *key);
    }
  }
  if (result->hits >= keys.size()) return;
  std::optional<TierNamespace> tn = NamespaceOf(ns);
  if (!tn.has_value()) return;
  absl::Span<const std::string_view> rest = keys.subspan(result->hits);
  std::vector<Tier> lower = LowerPrefix(ns, *tn, rest);
  if (lower.size() < rest.size()) {
    bool unknown = false;
    const std::string_view next = rest[lower.size()];
    CachedTier(*tn, absl::string_view(next.data(), next.size()), &unknown);
    if (unknown) {
      absl::Duration timeout = absl::ZeroDuration();
      for (const auto& t : tiers_) timeout = std::max(timeout, t->options.probe_timeout);
      ProbeChain(*tn, rest.subspan(lower.size()), timeout);
      lower = LowerPrefix(ns, *tn, rest);
    }
  }
  if (lower.empty()) return;
  if (lease_ttl.has_value()) {
    if (!result->lease.has_value()) {
      absl::StatusOr<LeaseId> lease = cache_->CreateEmptyLease(session, ns, *lease_ttl);
      if (lease.ok()) result->lease = *lease;
    }
    std::optional<LeaseRef> into;
    if (result->lease.has_value()) into = LeaseRef{session, *result->lease};
    // Past the first L1 miss, blocks still in L1 join the lease as they are; the others
    // are promoted into it.
    std::vector<std::string_view> in_l1;
    std::vector<std::string> promote;
    std::vector<Tier> promote_tiers;
    for (size_t i = 0; i < lower.size(); ++i) {
      if (lower[i] == Tier::kL1) {
        in_l1.push_back(rest[i]);
      } else {
        promote.emplace_back(rest[i]);
        promote_tiers.push_back(lower[i]);
      }
    }
    if (into.has_value() && !in_l1.empty()) cache_->AddToLease(*into, ns, in_l1);
    if (!promote.empty()) Promote(ns, *tn, std::move(promote), std::move(promote_tiers), into);
  }
  result->hits += lower.size();
  result->tiers.insert(result->tiers.end(), lower.begin(), lower.end());
}

void TierManager::Peek(NamespaceId ns, absl::Span<const std::string_view> keys,
                       std::vector<std::optional<Tier>>* where) {
  std::optional<TierNamespace> tn = NamespaceOf(ns);
  if (!tn.has_value()) return;
  for (size_t i = 0; i < keys.size() && i < where->size(); ++i) {
    if ((*where)[i].has_value()) continue;
    const absl::string_view key(keys[i].data(), keys[i].size());
    bool unknown = false;
    (*where)[i] = CachedTier(*tn, key, &unknown);
    if ((*where)[i].has_value() || !unknown) continue;
    for (const auto& lower : tiers_) {
      if (lower->storage->Probe(tn->fingerprint, key)) {
        (*where)[i] = lower->storage->level();
        break;
      }
    }
  }
}

size_t TierManager::Evict(NamespaceId ns, absl::Span<const std::string_view> keys,
                          std::optional<Tier> tier, std::vector<bool>* marks) {
  std::optional<TierNamespace> tn = NamespaceOf(ns);
  if (!tn.has_value()) return 0;
  size_t removed = 0;
  for (const auto& lower : tiers_) {
    if (tier.has_value() && lower->storage->level() != *tier) continue;
    for (size_t i = 0; i < keys.size(); ++i) {
      const std::string_view key = keys[i];
      if (!lower->storage->Remove(tn->fingerprint, absl::string_view(key.data(), key.size()))) {
        continue;
      }
      ++removed;
      if (marks != nullptr) (*marks)[i] = true;
    }
  }
  return removed;
}

size_t TierManager::Clear(std::optional<NamespaceId> ns, std::optional<Tier> tier) {
  std::optional<std::string> fingerprint;
  if (ns.has_value()) {
    std::optional<TierNamespace> tn = NamespaceOf(*ns);
    if (!tn.has_value()) return 0;
    fingerprint = tn->fingerprint;
  }
  size_t removed = 0;
  for (const auto& lower : tiers_) {
    if (tier.has_value() && lower->storage->level() != *tier) continue;
    removed += lower->storage->Clear(
        fingerprint.has_value() ? std::optional<absl::string_view>(*fingerprint) : std::nullopt);
  }
  return removed;
}

std::vector<LowerTierStatus> TierManager::Status() const {
  std::vector<LowerTierStatus> out;
  for (const auto& lower : tiers_) {
    LowerTierStatus st;
    st.tier = lower->storage->level();
    st.stats = lower->storage->Stats();
    st.queued_writes = lower->queued.load();
    st.dropped_writes = lower->dropped.load();
    st.promotions = lower->promotions.load();
    st.promoted_blocks = lower->promoted.load();
    st.write_back = lower->options.write_back;
    out.push_back(st);
  }
  return out;
}

}  // namespace kvstrata
