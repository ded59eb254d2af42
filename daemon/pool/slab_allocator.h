// SlabAllocator: hands out fixed-size slots of a region of `region_bytes`, addressed by
// offset (it never touches memory, so it can be tested without a mapping).
//
// The region is cut into slabs of `slab_bytes`. A slab belongs to at most one size class
// and holds slots of that class's size only; a class takes a free slab when it has no free
// slot. When no free slab remains, an EMPTY slab of another class moves to the starving
// class ("slab move"). Slots never split or merge, so there is no fragmentation beyond the
// tail of each slab. Empty slabs stay with their class until another class needs them.
//
// Order: a slot comes from the lowest-numbered slab of its class that has one, and within
// the slab it is the lowest free slot (a slab whose slots are all free again hands them out
// from its first slot on). So the blocks of one job, allocated one after another, land in
// ascending slots, mostly consecutive, which the GPU path moves as a few 2-D copies instead
// of one copy per piece (docs/gpu-data-path.md); slots freed one by one (evicted) are
// handed out again in address order too, not last-freed first (which ran a job's slots
// backwards: no 2-D copies at all).
//
// Thread safety: thread-safe (one internal mutex).
#ifndef KVSTRATA_DAEMON_POOL_SLAB_ALLOCATOR_H_
#define KVSTRATA_DAEMON_POOL_SLAB_ALLOCATOR_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "daemon/common/mutex.h"
#include "daemon/pool/slot.h"

namespace kvstrata {

struct SlabAllocatorOptions {
  uint64_t region_bytes = 0;       // rounded down to whole slabs (at least one)
  uint64_t slab_bytes = 64 << 20;  // 64 MiB
  uint64_t slot_alignment = 4096;  // slot sizes are rounded up to this (O_DIRECT-friendly)
  // Added to every offset: the allocator's range starts here in a larger region (a tenant's
  // partition of the L1 region). A multiple of slab_bytes.
  uint64_t base_offset = 0;
};

struct SlabAllocatorStats {
  uint64_t capacity_bytes = 0;  // slab_count * slab_bytes
  uint64_t used_bytes = 0;      // sum of the lengths of allocated slots
  uint64_t slab_count = 0;
  uint64_t free_slabs = 0;  // slabs of no class
  uint64_t slab_moves = 0;  // empty slabs moved from one class to another
  uint64_t allocated_slots = 0;
};

class SlabAllocator {
 public:
  static constexpr size_t kMaxClasses = 64;

  // INVALID_ARGUMENT for a zero slab size or alignment, or a region smaller than a slab.
  static absl::StatusOr<std::unique_ptr<SlabAllocator>> Create(SlabAllocatorOptions options);

  SlabAllocator(const SlabAllocator&) = delete;
  SlabAllocator& operator=(const SlabAllocator&) = delete;

  // The class for slots of at least `block_bytes`, created on first use.
  // INVALID_ARGUMENT for 0 bytes; RESOURCE_EXHAUSTED when a slot would not fit in a slab or
  // kMaxClasses classes exist.
  absl::StatusOr<SizeClassId> ClassFor(uint64_t block_bytes);
  uint64_t SlotBytes(SizeClassId cls) const;  // Lock-free.

  // A free slot of `cls`, or nullopt when the region has no room for one (the caller
  // evicts and retries, or drops). REQUIRES: cls came from ClassFor.
  std::optional<SlotHandle> Allocate(SizeClassId cls);
  // Returns a slot taken out of a handle with SlotHandle::Release. Aborts on a slot that
  // is not allocated (a broken invariant).
  void Free(const SlotRef& slot);

  SlabAllocatorStats Stats() const;
  uint64_t UsedBytes() const;  // Lock-free: the sum as of the last Allocate / Free.
  uint64_t capacity_bytes() const { return slab_bytes_ * slab_count_; }
  uint64_t slab_bytes() const { return slab_bytes_; }

 private:
  struct Slab {
    int cls = -1;                 // -1: free slab
    uint32_t used = 0;            // allocated slots
    uint32_t bump = 0;            // slots [bump, slots_per_slab) were never handed out
    std::vector<uint32_t> freed;  // slots handed out and returned: a min-heap
  };
  struct SizeClass {
    uint64_t slot_bytes = 0;
    uint32_t slots_per_slab = 0;
    absl::btree_set<uint32_t> partial;  // slabs of this class with a free slot, in order
  };

  SlabAllocator(uint64_t slab_bytes, uint64_t alignment, size_t slab_count, uint64_t base_offset);
  std::optional<uint32_t> TakeSlabLocked(int cls) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AssignSlabLocked(uint32_t slab, int cls) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const uint64_t slab_bytes_;
  const uint64_t alignment_;
  const uint64_t base_offset_;
  const size_t slab_count_;
  mutable Mutex mu_;
  std::vector<Slab> slabs_ ABSL_GUARDED_BY(mu_);
  std::vector<SizeClass> classes_ ABSL_GUARDED_BY(mu_);
  // classes_[i].slot_bytes, readable without mu_ (SlotBytes, on every store and eviction);
  // set once, when class i is made.
  std::array<std::atomic<uint64_t>, kMaxClasses> slot_bytes_{};
  std::vector<uint32_t> free_slabs_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<uint32_t> empty_slabs_ ABSL_GUARDED_BY(mu_);  // assigned, no slot used
  // Written under mu_, read without it (UsedBytes: a watermark check per allocation).
  std::atomic<uint64_t> used_bytes_ = 0;
  uint64_t allocated_slots_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t slab_moves_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_POOL_SLAB_ALLOCATOR_H_
