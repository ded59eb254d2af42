// WriteDown: copies L1 blocks into the tiers below it.
// - Write-through: a block committed to L1 is queued for each lower tier at once, or once it
//   has had `write_down_min_hits` L1 hits (CountHits). A block stored while the tier's queue
//   is full (defer_when_full) is set aside instead of dropped and queued at its first L1
//   hit, ahead of the backlog; if the queue is still full it takes the place of the newest
//   queued write of a block not reused (which is set aside in turn). One that leaves L1
//   before a hit is shed (counted), never written.
// - Write-back: a block is copied as L1 evicts it (only if it had enough hits, when the
//   tier asks for them).
// - Drain: every L1 block a tier lacks, now, on the caller's thread.
// Writes run on the tier's I/O threads behind its reads; a full queue (write_queue_blocks)
// drops the write, counted, never the engine's store. A block L1 evicts before its write ran
// is copied for it, under L1's lock, while the tier's copies stay within evicted_copy_bytes;
// past that the write is shed (write-back: dropped), counted, so a slow disk never turns the
// engine's stores into copies of everything they evict. A block the tier's index holds is not
// written again: a local tier's index is asked before the write is queued (so an engine's
// store of blocks the tier holds -- e.g. a prompt recomputed rather than read from the disk --
// and a promotion's commit cost no queue slot and no I/O; counted in LowerTier::present);
// on a shared tier (L3) the index's word is checked with a probe when the write runs, so a
// block whose file another node deleted is written again.
// Thread-safe. OnStored and OnEvicting are called with BlockCache's lock held and only
// queue work; Drain blocks on I/O.
#ifndef KVSTRATA_DAEMON_TIERING_WRITE_DOWN_H_
#define KVSTRATA_DAEMON_TIERING_WRITE_DOWN_H_

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
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
  // other: the block still in L1, or this copy) -- when the tier's evicted_copy_bytes has
  // room; else the write is shed.
  struct PendingWrite {
    std::string copy;
    bool started = false;    // by pending_mu: its write began
    bool cancelled = false;  // by pending_mu: Preempt took its place
    bool reused = false;     // by pending_mu: hit while queued (Preempt spares it)
  };
  struct Queue {
    LowerTier* tier = nullptr;  // its queued/dropped counters are ours
    Mutex pending_mu;
    absl::flat_hash_map<BlockKey, std::shared_ptr<PendingWrite>> pending
        ABSL_GUARDED_BY(pending_mu);
    absl::flat_hash_set<BlockKey> deferred ABSL_GUARDED_BY(pending_mu);  // waiting for a hit
    // Queued writes of blocks not reused, oldest first (Preempt takes the newest; the ones
    // already started are dropped from the front as new ones come).
    std::deque<std::pair<BlockKey, std::shared_ptr<PendingWrite>>> backlog
        ABSL_GUARDED_BY(pending_mu);
    // Bytes of the copies held now (PendingWrite::copy of both policies), at most the
    // tier's evicted_copy_bytes (TakeCopyRoom).
    std::atomic<uint64_t> copied_bytes{0};
  };

  // Room for a copy of `bytes` within the tier's evicted_copy_bytes: true when taken.
  static bool TakeCopyRoom(Queue& queue, uint64_t bytes);
  static void ReturnCopyRoom(Queue& queue, uint64_t bytes) { queue.copied_bytes.fetch_sub(bytes); }

  // Whether a stored block should wait for its first hit (see above); sets it aside.
  static bool Defer(Queue& queue, const BlockKey& key);
  // Takes `key` out of the blocks waiting for a hit: true when it was one.
  static bool Undefer(Queue& queue, const BlockKey& key);
  static bool UndeferLocked(Queue& queue, const BlockKey& key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue.pending_mu);
  // Whether hits matter to what `tier` writes: blocks wait for a hit, or its queue is at
  // least half full (a hit then spares a queued block from Preempt).
  static bool Backlogged(const LowerTier& tier) {
    return tier.options.defer_when_full &&
           (tier.deferred.load() > 0 || tier.queued.load() * 2 >= tier.options.write_queue_blocks);
  }
  // An L1 hit of `key`: true when it was set aside (Undefer); a queued write of it is
  // marked reused instead.
  static bool Reused(Queue& queue, const BlockKey& key);
  // Cancels the newest queued write of a block not reused (set aside, then hit, or hit
  // while queued) whose block is still in L1, and sets that block aside: true when one was
  // found.
  static bool Preempt(Queue& queue);
  // Queues a write of `key` to `queue`'s tier: of `copied` when given (its room taken by the
  // caller: given back when the write ends), else of the block in L1. A full queue
  // (write_queue_blocks) drops it, counted, unless it is `reused` (set aside, then hit) and
  // Preempt makes room. Returns whether it was queued.
  bool Enqueue(Queue& queue, NamespaceId ns, const BlockKey& key, std::string copied,
               bool reused = false);
  // True when a local (not shared) `lower`'s index holds the block: a write of it from L1
  // need not be queued (counted in lower.present). Memory only (BlockTier::Cached).
  bool IndexHolds(LowerTier& lower, NamespaceId ns, const BlockKey& key);
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
