// Promoter: brings blocks up from L2/L3 into L1, on the tiers' I/O threads (urgent, ahead of
// writes). A batch is split into tasks so that it spreads over all of the tier's threads:
// BlocksPerTask blocks each, so even a short prompt's reads are in flight at once as deep as
// the tier has threads (a 16-block batch on 4 threads: 4 reads at a time, not 2), and a long
// batch's tasks hold kMaxBlocksPerTask blocks (an L1 reservation each) and interleave with
// other batches'. A promoted block is stored in L1 like an engine's store (reserve, read the
// file into the slot, commit) and can join a lease as it lands. A key is promoted once at a
// time: a second request for a key in flight gets the same mark to wait on. Blocks that fail
// to come up are simply not in L1.
// Thread-safe. Promote never blocks on I/O; Wait blocks up to `promotion_wait`.
#ifndef KVSTRATA_DAEMON_TIERING_PROMOTER_H_
#define KVSTRATA_DAEMON_TIERING_PROMOTER_H_

#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "daemon/cache/cache_types.h"
#include "daemon/index/block_key.h"
#include "daemon/tiering/tier_stack.h"

namespace kvstrata {

class Promoter {
 public:
  // One key's promotion; `done` is guarded by the promoter's lock.
  struct Promotion {
    bool done = false;
  };
  using Marks = std::vector<std::shared_ptr<Promotion>>;
  static constexpr size_t kMaxBlocksPerTask = 8;
  // The blocks per I/O task for a batch of `blocks` on a tier with `io_threads` threads:
  // ceil(blocks / io_threads), at least 1, at most kMaxBlocksPerTask. (bench/tiers/l2_fio.cc
  // submits its reads the same way.)
  static size_t BlocksPerTask(size_t blocks, size_t io_threads);

  // `stack` outlives this.
  Promoter(TierStack* stack, absl::Duration promotion_wait)
      : stack_(stack), promotion_wait_(promotion_wait) {}
  Promoter(const Promoter&) = delete;
  Promoter& operator=(const Promoter&) = delete;

  absl::Duration promotion_wait() const { return promotion_wait_; }

  // Starts promoting keys[i] from tiers[i]; the blocks join `into` as they land (when
  // given). Keys already in flight are not started again. Returns the marks of every key
  // now in flight (started here or before).
  Marks Promote(NamespaceId ns, const TierNamespace& tn, std::vector<std::string> keys,
                std::vector<Tier> tiers, std::optional<LeaseRef> into);
  // A load's work: the promotions of `keys` in flight, and the keys not in L1
  // (`in_l1[i]` unset) that a lower tier's index holds, with that tier, to promote.
  struct LoadPlan {
    Marks in_flight;
    std::vector<std::string> promote;
    std::vector<Tier> tiers;
  };
  LoadPlan PlanLoad(NamespaceId ns, const TierNamespace& tn,
                    absl::Span<const std::string_view> keys,
                    const std::vector<std::optional<Tier>>& in_l1);
  // Blocks until every mark is done or promotion_wait passed.
  void Wait(const Marks& marks);

 private:
  void PromoteChunk(NamespaceId ns, const TierNamespace& tn, const std::vector<std::string>& keys,
                    const std::vector<Tier>& tiers, std::optional<LeaseRef> into,
                    const Marks& marks);
  // Reads the keys whose L1 slot `reserved` holds for them into those slots, one
  // BlockTier::ReadMany per tier (a chunk mixing L2 and L3 keys makes two). Returns the
  // indexes of the keys read, in order.
  std::vector<uint32_t> ReadReserved(const TierNamespace& tn, const std::vector<std::string>& keys,
                                     const std::vector<Tier>& tiers, const ReserveResult& reserved);
  // The keys' promotions are over (landed or not): wakes their waiters.
  void Finish(NamespaceId ns, const std::vector<std::string>& keys, const Marks& marks);

  TierStack* const stack_;
  const absl::Duration promotion_wait_;
  std::mutex mu_;
  std::condition_variable cv_;
  absl::flat_hash_map<BlockKey, std::shared_ptr<Promotion>> promoting_;  // by mu_
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_TIERING_PROMOTER_H_
