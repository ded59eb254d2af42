// WriteDown: copies L1 blocks into the tiers below it.
// - Write-through: a block committed to L1 is queued for each lower tier at once, or once it
//   has had `write_down_min_hits` L1 hits (CountHits). While a tier's queue is at least
//   half full (defer_when_backlogged), a new block is set aside instead and queued at its
//   first L1 hit, so the room left goes to blocks that are reused; one that leaves L1
//   before a hit is shed (counted), never written.
// - Write-back: a block is copied as L1 evicts it (only if it had enough hits, when the
//   tier asks for them).
// - Drain: every L1 block a tier lacks, now, on the caller's thread.
// Writes run on the tier's I/O threads behind its reads; a full queue (write_queue_blocks)
// drops the write, counted, never the engine's store. A block the tier's index holds is not
// written again; on a shared tier (L3) the index's word is checked with a probe first, so a
// block whose file another node deleted is written again.
// Thread-safe. OnStored and OnEvicting are called with BlockCache's lock held and only
// queue work; Drain blocks on I/O.
#ifndef KVSTRATA_DAEMON_TIERING_WRITE_DOWN_H_
#define KVSTRATA_DAEMON_TIERING_WRITE_DOWN_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "daemon/common/mutex.h"
#include "daemon/index/block_key.h"
#include "daemon/tiering/tier_stack.h"

namespace kvstrata {

class WriteDown {
 public:
  // `stack` outlives this.
  explicit WriteDown(TierStack* stack) : stack_(stack) {}
  WriteDown(const WriteDown&) = delete;
  WriteDown& operator=(const WriteDown&) = delete;

  // Set-up: the stack's tier just added (before serving).
  void AddTier(LowerTier* tier);

  // A block was committed to L1; one left it (any cause).
  void OnStored(NamespaceId ns, const BlockKey& key);
  void OnRemoved(const BlockKey& key);
  // L1 is evicting a block whose bytes are at region offset/length (with its lock held).
  void OnEvicting(NamespaceId ns, const BlockKey& key, uint64_t offset, uint64_t length);
  // The leading `keys` were L1 hits of one lookup.
  void CountHits(NamespaceId ns, absl::Span<const std::string_view> keys);
  // Writes every L1 block that `tier` (nullopt = each lower tier) lacks, calling
  // progress(done, total) as blocks finish. Returns the blocks written.
  absl::StatusOr<size_t> Drain(std::optional<Tier> tier,
                               const std::function<void(uint64_t, uint64_t)>& progress);

 private:
  // A queued write of an L1 block. If L1 evicts the block before the write runs, its bytes
  // are copied here on the way out (under the cache lock, so the writer sees one or the
  // other: the block still in L1, or this copy).
  struct PendingWrite {
    std::string copy;
  };
  struct Queue {
    LowerTier* tier = nullptr;  // its queued/dropped counters are ours
    Mutex pending_mu;
    absl::flat_hash_map<BlockKey, std::shared_ptr<PendingWrite>> pending
        ABSL_GUARDED_BY(pending_mu);
    absl::flat_hash_set<BlockKey> deferred ABSL_GUARDED_BY(pending_mu);  // waiting for a hit
  };

  // Whether a stored block should wait for its first hit (see above); sets it aside.
  static bool Defer(Queue& queue, const BlockKey& key);
  // Takes `key` out of the blocks waiting for a hit: true when it was one.
  static bool Undefer(Queue& queue, const BlockKey& key);
  // Queues a write of `key` to `queue`'s tier: of `copied` when given, else of the block in L1.
  void Enqueue(Queue& queue, NamespaceId ns, const BlockKey& key, std::string copied);
  // True when `lower` holds the block, so a write would be a no-op: its index says so, and
  // on a shared tier a probe of the file agrees.
  static bool AlreadyThere(LowerTier& lower, const TierNamespace& tn, absl::string_view key);
  bool WriteFromL1(Queue& queue, NamespaceId ns, const TierNamespace& tn, absl::string_view key,
                   const PendingWrite* fallback);

  TierStack* const stack_;
  std::vector<std::unique_ptr<Queue>> queues_;  // one per tier, in the stack's order
  bool counts_hits_ = false;                    // some tier has write_down_min_hits
  Mutex hits_mu_;
  absl::flat_hash_map<BlockKey, uint32_t> l1_hits_ ABSL_GUARDED_BY(hits_mu_);
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_TIERING_WRITE_DOWN_H_
