#include "daemon/pool/slab_allocator.h"

#include <cstdio>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kvstrata {
namespace {

[[noreturn]] void Die(const char* what) {
  std::fprintf(stderr, "SlabAllocator invariant broken: %s\n", what);
  std::abort();
}

}  // namespace

void SlotHandle::Reset() {
  if (owner_ != nullptr) std::exchange(owner_, nullptr)->Free(ref_);
}

absl::StatusOr<std::unique_ptr<SlabAllocator>> SlabAllocator::Create(SlabAllocatorOptions options) {
  if (options.slab_bytes == 0 || options.slot_alignment == 0) {
    return absl::InvalidArgumentError("slab size and slot alignment must be > 0");
  }
  if (options.region_bytes < options.slab_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("region of ", options.region_bytes,
                                                   " bytes is smaller than one slab of ",
                                                   options.slab_bytes));
  }
  size_t count = options.region_bytes / options.slab_bytes;
  return std::unique_ptr<SlabAllocator>(
      new SlabAllocator(options.slab_bytes, options.slot_alignment, count, options.base_offset));
}

SlabAllocator::SlabAllocator(uint64_t slab_bytes, uint64_t alignment, size_t slab_count,
                             uint64_t base_offset)
    : slab_bytes_(slab_bytes),
      alignment_(alignment),
      base_offset_(base_offset),
      slab_count_(slab_count),
      slabs_(slab_count) {
  free_slabs_.reserve(slab_count);
  for (size_t i = slab_count; i > 0; --i) free_slabs_.push_back(static_cast<uint32_t>(i - 1));
}

absl::StatusOr<SizeClassId> SlabAllocator::ClassFor(uint64_t block_bytes) {
  if (block_bytes == 0) return absl::InvalidArgumentError("block size is 0");
  uint64_t slot = (block_bytes + alignment_ - 1) / alignment_ * alignment_;
  if (slot > slab_bytes_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("block of ", block_bytes, " bytes does not fit in a slab of ", slab_bytes_));
  }
  MutexLock lock(&mu_);
  for (size_t i = 0; i < classes_.size(); ++i) {
    if (classes_[i].slot_bytes == slot) return static_cast<SizeClassId>(i);
  }
  if (classes_.size() >= kMaxClasses) {
    return absl::ResourceExhaustedError("too many block size classes");
  }
  SizeClass& c = classes_.emplace_back();
  c.slot_bytes = slot;
  c.slots_per_slab = static_cast<uint32_t>(slab_bytes_ / slot);
  slot_bytes_[classes_.size() - 1].store(slot, std::memory_order_release);
  return static_cast<SizeClassId>(classes_.size() - 1);
}

uint64_t SlabAllocator::SlotBytes(SizeClassId cls) const {
  if (cls >= kMaxClasses) Die("size class out of range");
  return slot_bytes_[cls].load(std::memory_order_acquire);
}

std::optional<uint32_t> SlabAllocator::TakeSlabLocked(int cls) {
  if (!free_slabs_.empty()) {
    uint32_t slab = free_slabs_.back();
    free_slabs_.pop_back();
    return slab;
  }
  for (uint32_t slab : empty_slabs_) {
    if (slabs_[slab].cls == cls) continue;  // its own empty slabs are already partial
    classes_[slabs_[slab].cls].partial.erase(slab);
    empty_slabs_.erase(slab);
    ++slab_moves_;
    return slab;
  }
  return std::nullopt;
}

void SlabAllocator::AssignSlabLocked(uint32_t slab, int cls) {
  Slab& s = slabs_[slab];
  s.cls = cls;
  s.used = 0;
  s.bump = 0;
  s.freed.clear();
  s.freed.shrink_to_fit();
  classes_[cls].partial.insert(slab);
  empty_slabs_.insert(slab);
}

std::optional<SlotHandle> SlabAllocator::Allocate(SizeClassId cls) {
  MutexLock lock(&mu_);
  SizeClass& c = classes_.at(cls);
  if (c.partial.empty()) {
    std::optional<uint32_t> slab = TakeSlabLocked(cls);
    if (!slab.has_value()) return std::nullopt;
    AssignSlabLocked(*slab, cls);
  }
  uint32_t slab_index = *c.partial.begin();
  Slab& s = slabs_[slab_index];
  uint32_t slot;
  if (!s.freed.empty()) {  // The lowest freed slot (every freed slot is below `bump`).
    std::pop_heap(s.freed.begin(), s.freed.end(), std::greater<>());
    slot = s.freed.back();
    s.freed.pop_back();
  } else {
    slot = s.bump++;
  }
  if (s.used++ == 0) empty_slabs_.erase(slab_index);
  if (s.used == c.slots_per_slab) c.partial.erase(slab_index);
  used_bytes_.fetch_add(c.slot_bytes, std::memory_order_relaxed);
  ++allocated_slots_;
  SlotRef ref{base_offset_ + slab_index * slab_bytes_ + slot * c.slot_bytes, c.slot_bytes, cls};
  return SlotHandle(this, ref);
}

void SlabAllocator::Free(const SlotRef& ref) {
  MutexLock lock(&mu_);
  if (ref.offset < base_offset_) Die("slot offset below the allocator's range");
  uint64_t offset = ref.offset - base_offset_;
  uint64_t slab_index = offset / slab_bytes_;
  if (slab_index >= slabs_.size()) Die("slot offset outside the region");
  Slab& s = slabs_[slab_index];
  if (s.cls != ref.size_class || s.used == 0) Die("slot freed twice or with a wrong class");
  SizeClass& c = classes_[ref.size_class];
  uint64_t in_slab = offset % slab_bytes_;
  if (in_slab % c.slot_bytes != 0) Die("slot offset not on a slot boundary");
  s.freed.push_back(static_cast<uint32_t>(in_slab / c.slot_bytes));
  std::push_heap(s.freed.begin(), s.freed.end(), std::greater<>());
  c.partial.insert(static_cast<uint32_t>(slab_index));
  if (--s.used == 0) {
    empty_slabs_.insert(static_cast<uint32_t>(slab_index));
    s.bump = 0;  // All free again: hand the slots out in address order.
    s.freed.clear();
  }
  used_bytes_.fetch_sub(c.slot_bytes, std::memory_order_relaxed);
  --allocated_slots_;
}

uint64_t SlabAllocator::UsedBytes() const { return used_bytes_.load(std::memory_order_relaxed); }

SlabAllocatorStats SlabAllocator::Stats() const {
  MutexLock lock(&mu_);
  SlabAllocatorStats st;
  st.capacity_bytes = slab_bytes_ * slabs_.size();
  st.used_bytes = used_bytes_.load(std::memory_order_relaxed);
  st.slab_count = slabs_.size();
  st.free_slabs = free_slabs_.size();
  st.slab_moves = slab_moves_;
  st.allocated_slots = allocated_slots_;
  return st;
}

}  // namespace kvstrata
