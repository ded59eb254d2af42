// SlotRef and SlotHandle: one fixed-size slot of the shared region.
//
// SlotRef is a plain record (offset, length, class) suitable for storing in the index.
// SlotHandle is its move-only owner: destroying a handle returns the slot to its
// SlabAllocator; Release() hands ownership back to the caller as a SlotRef (the caller then
// frees it with SlabAllocator::Free). A handle must not outlive its allocator.
// Thread safety: a handle is used by one thread at a time; freeing is thread-safe.
#ifndef KVSTRATA_DAEMON_POOL_SLOT_H_
#define KVSTRATA_DAEMON_POOL_SLOT_H_

#include <cstdint>
#include <utility>

namespace kvstrata {

using SizeClassId = uint8_t;

struct SlotRef {
  uint64_t offset = 0;  // bytes from the start of the shared region
  uint64_t length = 0;  // slot size of the class (>= the block size asked for)
  SizeClassId size_class = 0;
};

class SlabAllocator;

class SlotHandle {
 public:
  SlotHandle() = default;
  SlotHandle(SlabAllocator* owner, SlotRef ref) : owner_(owner), ref_(ref) {}
  SlotHandle(SlotHandle&& other) noexcept
      : owner_(std::exchange(other.owner_, nullptr)), ref_(other.ref_) {}
  SlotHandle& operator=(SlotHandle&& other) noexcept {
    if (this != &other) {
      Reset();
      owner_ = std::exchange(other.owner_, nullptr);
      ref_ = other.ref_;
    }
    return *this;
  }
  SlotHandle(const SlotHandle&) = delete;
  SlotHandle& operator=(const SlotHandle&) = delete;
  ~SlotHandle() { Reset(); }

  bool valid() const { return owner_ != nullptr; }
  const SlotRef& ref() const { return ref_; }
  uint64_t offset() const { return ref_.offset; }
  uint64_t length() const { return ref_.length; }
  SizeClassId size_class() const { return ref_.size_class; }

  // Gives up ownership without freeing; the caller must Free the returned slot later.
  SlotRef Release() {
    owner_ = nullptr;
    return ref_;
  }
  // Frees the slot now (no-op when empty).
  void Reset();

 private:
  SlabAllocator* owner_ = nullptr;
  SlotRef ref_;
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_POOL_SLOT_H_
