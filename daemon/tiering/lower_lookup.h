// LowerLookup: which lower tier holds each block past L1's hits. The tiers' indexes answer
// first, without I/O; where an index cannot tell (a key it does not know; a local tier
// still scanning after a restart) the block files are probed: a chain's keys in parallel on
// a pool of probe threads of its own, skipping the keys past the first one no tier has,
// waiting at most a timeout (answers arriving later still land in the tiers' indexes). A
// shared tier's entry not seen within its presence_ttl (kStale) counts as the index says
// and is probed in the background after the lookup (presence_check "async", the default),
// or is probed with the unknown keys before the lookup answers ("sync"; one whose probe
// does not answer in time counts as the index says).
// Thread-safe. FindChain blocks up to the tiers' largest probe_timeout, Probe up to its
// `timeout`, Peek on one probe per unknown key.
#ifndef KVSTRATA_DAEMON_TIERING_LOWER_LOOKUP_H_
#define KVSTRATA_DAEMON_TIERING_LOWER_LOOKUP_H_

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "daemon/common/mutex.h"
#include "daemon/tiering/tier_stack.h"
#include "daemon/tiers/io_pool.h"

namespace kvstrata {

class LowerLookup {
 public:
  using Keys = absl::Span<const std::string_view>;

  // `stack` outlives this.
  explicit LowerLookup(TierStack* stack);
  LowerLookup(const LowerLookup&) = delete;
  LowerLookup& operator=(const LowerLookup&) = delete;
  ~LowerLookup() { Stop(); }
  // Stops the probe threads (queued probes are dropped). Idempotent.
  void Stop() { prober_->Stop(); }

  // The leading `keys` present in some tier, with the fastest tier of each (kL1 for a key
  // still in L1 past the lookup's first L1 miss: in_l1[i], as L1's lookup answered it,
  // LookupResult::in_l1_past_miss; L1 is not asked again); probes files when an index
  // cannot tell. REQUIRES: in_l1.size() == keys.size().
  std::vector<Tier> FindChain(const TierNamespace& tn, Keys keys, const std::vector<bool>& in_l1);
  // Probes the keys whose presence the indexes cannot tell (up to 1024), waiting at most
  // `timeout`: afterwards the indexes know what the probes found. `chain` (a lookup: the
  // keys are a prefix chain, which ends at its first absent key): keys past the first
  // absent one are not probed. Otherwise (a load of any keys) every key is probed.
  enum class Probing { kChain, kEveryKey };
  void Probe(const TierNamespace& tn, Keys keys, absl::Duration timeout,
             Probing probing = Probing::kChain);
  // Admin: the lower tier holding each key whose `where` entry is unset (set entries are
  // kept), probing the keys no index can tell about with one BlockTier::ProbeMany per tier,
  // fastest tier first (a key found is not probed further down).
  void Peek(const TierNamespace& tn, Keys keys, std::vector<std::optional<Tier>>* where);

 private:
  // The leading keys present per `in_l1` and the indexes, without I/O (kStale entries
  // count with `trust_stale`).
  std::vector<Tier> Prefix(const TierNamespace& tn, Keys keys, const std::vector<bool>& in_l1,
                           bool trust_stale);
  // Whether a tier checks stale entries within the lookup (presence_check "sync").
  bool SyncPresenceCheck() const;
  // Whether some tier holds `key` (its index, else a probe of its file: blocks on I/O).
  bool ProbeKey(const TierNamespace& tn, absl::string_view key);
  // Starts background probes of the stale entries among `keys` (each key once at a time)
  // and returns: the indexes know the answers by the next lookup.
  void RecheckStale(const TierNamespace& tn, Keys keys);

  static constexpr size_t kMaxRechecks = 4096;  // background probes queued at once

  TierStack* const stack_;
  std::unique_ptr<IoPool> prober_;
  Mutex recheck_mu_;
  absl::flat_hash_set<std::string> rechecking_ ABSL_GUARDED_BY(recheck_mu_);
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_TIERING_LOWER_LOOKUP_H_
