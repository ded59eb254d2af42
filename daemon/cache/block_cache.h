// BlockCache: the L1 (pinned shared-memory) tier — index + slab pool + eviction policy +
// leases — behind the calls the gRPC layer makes.
//
// Visibility: a stored block becomes visible to Lookup/AcquireLoad only when its
// reservation is committed; an aborted, expired or abandoned reservation returns its slots
// and is never seen — once no process that may still write them runs (may_write, see
// ReleaseFenced). Safety: a block under a lease, an open load, an open reservation, or
// an admin pin is never evicted; every pin ends with its lease (consumed, released,
// expired), load (ReleaseLoad) or session (EndSession).
//
// Errors: INVALID_ARGUMENT for an empty or > 32-byte key, too many keys, a zero block
// size or one that differs from the size already used by the namespace, a bad index or a
// non-positive lease TTL; NOT_FOUND for an unknown (or ended) reservation, lease or load;
// FAILED_PRECONDITION for an id that belongs to another session, or a reservation that was
// already committed or aborted; RESOURCE_EXHAUSTED for a store that can never fit (a block
// larger than a slab, or more bytes than the whole pool). Pressure is not an error: such
// keys come back kDropped. Namespace validation is the caller's.
//
// Thread safety: thread-safe. One mutex serialises the calls (the index below is sharded
// but the policy and the slot/pin bookkeeping are not), except Lookup without a lease,
// which reads the index without it (see Lookup). Lock order: BlockCache::mu_, then
// LeaseTable's, then SlabAllocator's, then a BlockIndex shard's. The TierListener is
// called with mu_ held.
// Ownership: the allocator (and clock, listener) are not owned and must outlive the cache.
#ifndef KVSTRATA_DAEMON_CACHE_BLOCK_CACHE_H_
#define KVSTRATA_DAEMON_CACHE_BLOCK_CACHE_H_

#include <atomic>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "daemon/cache/cache_types.h"
#include "daemon/common/mutex.h"
#include "daemon/eviction/eviction_policy.h"
#include "daemon/index/block_index.h"
#include "daemon/lease/lease_table.h"
#include "daemon/pool/slab_allocator.h"

namespace kvstrata {

class BlockCache {
 public:
  using Keys = absl::Span<const std::string_view>;

  // INVALID_ARGUMENT for an unknown policy name or watermarks outside 0 < low <= high <= 1.
  static absl::StatusOr<std::unique_ptr<BlockCache>> Create(SlabAllocator* allocator,
                                                            BlockCacheOptions options);
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;
  ~BlockCache();

  // Leading present blocks of `keys`. With a lease TTL and at least one hit, the hits are
  // pinned under a new lease owned by `session`. Without a lease (and without an admission
  // threshold) a lookup does not wait for the cache's mutex: it reads the sharded index,
  // and records its hits in the eviction policy only when the mutex is free at that moment
  // (recency is best effort under contention, like Caffeine's lossy read buffer).
  // `past_miss`: also answer which keys after the first miss L1 holds
  // (LookupResult::in_l1_past_miss), in the same call.
  absl::StatusOr<LookupResult> Lookup(SessionId session, NamespaceId ns, Keys keys,
                                      std::optional<absl::Duration> lease_ttl,
                                      bool past_miss = false);

  // Reserves one slot per new key (see StoreStatus). Never blocks on pressure.
  // `bypass_admission`: blocks promoted from L2/L3 were admitted when first stored.
  // `slot_order`: empty, or a permutation of the keys' indices in which their slots are
  // taken (the slab allocator hands out ascending slots, so the job manager passes the
  // order of the engine's block ids: its copies then group into 2-D copies); the blocks
  // are still published in key order. INVALID_ARGUMENT when it is not a permutation.
  absl::StatusOr<ReserveResult> ReserveStore(SessionId session, NamespaceId ns,
                                             uint64_t block_bytes, Keys keys,
                                             bool bypass_admission = false,
                                             absl::Span<const uint32_t> slot_order = {});
  // Makes the reserved blocks at `written` (indices into the ReserveStore keys; nullopt =
  // all) visible and frees the other reserved slots. Returns the number made visible.
  // With `into`, the blocks made visible also join that lease (pinned with it) when it is
  // still live: a promotion hands its blocks to the lookup that asked for them.
  absl::StatusOr<size_t> CommitStore(SessionId session, ReservationId reservation,
                                     std::optional<absl::Span<const uint32_t>> written,
                                     std::optional<LeaseRef> into = std::nullopt);
  // Pins the keys that are visible in L1 under a live lease of `into.session` and adds
  // them to it; returns how many joined (0 when the lease has ended).
  size_t AddToLease(LeaseRef into, NamespaceId ns, Keys keys);
  // A lease that holds nothing yet (blocks join it through CommitStore's `into`).
  // INVALID_ARGUMENT for a TTL outside (0, max_lease_ttl].
  absl::StatusOr<LeaseId> CreateEmptyLease(SessionId session, absl::Duration ttl);
  // Every visible L1 block (of one namespace, or all): what a drain writes down.
  std::vector<BlockKey> VisibleKeys(std::optional<NamespaceId> ns) const;
  // Frees every slot of the reservation; none becomes visible.
  absl::Status AbortStore(SessionId session, ReservationId reservation);

  // Pins each present key for reading until ReleaseLoad. A given lease is consumed (its
  // pins pass to the load); NOT_FOUND / FAILED_PRECONDITION as for leases.
  absl::StatusOr<LoadResult> AcquireLoad(SessionId session, NamespaceId ns, Keys keys,
                                         std::optional<LeaseId> lease);
  absl::Status ReleaseLoad(SessionId session, LoadId load);
  // Where each key is (fastest tier), without touching statistics, eviction order or
  // admission counters: the admin view.
  absl::StatusOr<std::vector<std::optional<Tier>>> Peek(NamespaceId ns, Keys keys) const;
  // Ends a lease unused.
  absl::Status ReleaseLease(SessionId session, LeaseId lease);
  // LeaseTable::Owner / Transfer (no pin changes: the pins go with the lease).
  absl::StatusOr<SessionId> LeaseOwner(LeaseId lease) const { return leases_.Owner(lease); }
  absl::Status TransferLease(LeaseId lease, SessionId from, SessionId to) {
    return leases_.Transfer(lease, from, to);
  }

  // Releases every lease, reservation (uncommitted slots reclaimed) and load of `session`.
  // While options.may_write(session) holds, the slots of its reservations (never visible)
  // and loads (still pinned) are fenced instead of freed, both counted in
  // Stats().fenced_bytes: see ReleaseFenced.
  SessionEndResult EndSession(SessionId session);
  // Ends expired leases and reservations older than reservation_ttl (fenced as above).
  ReapResult ReapExpired();
  // Frees what EndSession and ReapExpired fenced for `session`, once no process of it can
  // touch the slots any more. Returns the number of slots given back or unpinned.
  size_t ReleaseFenced(SessionId session);

  // Admin. Evict skips blocks in use (leased, loading, being stored) and admin-pinned
  // ones, and sets evicted[i] for each keys[i] it evicts (when given; sized like keys);
  // Clear (one namespace, or all with nullopt) skips only blocks in use.
  absl::StatusOr<size_t> Evict(NamespaceId ns, Keys keys, std::vector<bool>* evicted = nullptr);
  size_t Clear(std::optional<NamespaceId> ns);
  // Pinned blocks are never evicted. Return how many present blocks changed state.
  absl::StatusOr<size_t> Pin(NamespaceId ns, Keys keys);
  absl::StatusOr<size_t> Unpin(NamespaceId ns, Keys keys);
  // Whether each key is pinned by an admin (an absent key is not).
  absl::StatusOr<std::vector<bool>> Pinned(NamespaceId ns, Keys keys) const;

  CacheStats Stats() const;

 private:
  struct PendingBlock {
    uint32_t index;  // position in the ReserveStore request
    BlockKey key;
    SlotRef slot;
  };
  struct Reservation {
    SessionId session = 0;
    absl::Time expires;
    bool closed = false;  // committed or aborted: kept only to answer a repeat
    std::vector<PendingBlock> blocks;
    uint32_t request_size = 0;
  };
  struct Load {
    SessionId session = 0;
    std::vector<BlockKey> keys;
  };
  // What an ended (or expired) session's process may still touch.
  struct Fenced {
    std::vector<SlotRef> slots;       // reserved, never visible, out of the pool
    std::vector<BlockKey> load_keys;  // visible, still pinned (refs) for the reader
    uint64_t load_bytes = 0;          // their slots' bytes, counted in fenced_bytes_
  };

  BlockCache(SlabAllocator* allocator, BlockCacheOptions options,
             std::unique_ptr<EvictionPolicy> policy);

  // Shared helpers (block_cache.cc).
  absl::StatusOr<size_t> SetPinned(NamespaceId ns, Keys keys, bool pinned);
  absl::Status CheckBlockBytesLocked(NamespaceId ns, uint64_t block_bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t BlockBytesLocked(NamespaceId ns, const BlockEntry& e) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AddRefsLocked(absl::Span<const BlockKey> keys, int delta) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool EvictableLocked(EvictionPolicy::Id id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool EvictOneLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes a visible, unused block from every structure.
  void RemoveBlockLocked(const BlockKey& key, const BlockEntry& entry, RemovalCause cause)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CountMissesLocked(absl::Span<const BlockKey> missed) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Recency and admission bookkeeping of one lookup.
  // Whether each key is visible in the index (Peek's test), without touching anything.
  std::vector<bool> Visible(absl::Span<const BlockKey> keys) const;
  void RecordLookupLocked(const PrefixMatch& match, absl::Span<const BlockKey> keys)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Store path (block_cache_store.cc).
  StoreStatus ReserveOneLocked(const BlockKey& key, SizeClassId cls, bool check_admission,
                               size_t* budget, SlotRef* slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckLeaseTtl(absl::Duration ttl) const;
  std::optional<SlotHandle> AllocateLocked(SizeClassId cls, size_t* budget)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleasePendingLocked(const PendingBlock& block) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A committed block's bookkeeping (its index entry is made visible by the caller).
  void PublishLocked(const BlockKey& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<Reservation*> OpenReservationLocked(SessionId session, ReservationId id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CloseReservationLocked(Reservation& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes the reservations `doomed` picks; returns how many were still open. Slots of a
  // session that may still write (options.may_write) are fenced, counted in *fenced.
  size_t DropReservationsLocked(absl::FunctionRef<bool(const Reservation&)> doomed, size_t* fenced)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool MayWriteLocked(SessionId session) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  SlabAllocator* const allocator_;
  const BlockCacheOptions options_;
  Clock* const clock_;
  BlockIndex index_;
  LeaseTable leases_;

  mutable Mutex mu_;
  std::unique_ptr<EvictionPolicy> policy_ ABSL_GUARDED_BY(mu_);
  // Policy id (key fingerprint) -> key, for resident and pending L1 blocks.
  absl::flat_hash_map<uint64_t, BlockKey> by_id_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<NamespaceId, uint64_t> ns_block_bytes_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<NamespaceId, uint64_t> ns_blocks_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<BlockKey, uint32_t> miss_counts_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<ReservationId, Reservation> reservations_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<LoadId, Load> loads_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<SessionId, Fenced> fenced_ ABSL_GUARDED_BY(mu_);
  uint64_t fenced_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_);  // reservation and load ids (from options.first_id)
  uint64_t open_reservations_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t blocks_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<uint64_t> hits_{0};
  std::atomic<uint64_t> misses_{0};
  std::atomic<uint64_t> skipped_touches_{0};  // lookups whose recency update was dropped
  uint64_t evictions_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t not_admitted_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_CACHE_BLOCK_CACHE_H_
