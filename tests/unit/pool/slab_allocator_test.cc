#include "daemon/pool/slab_allocator.h"

#include <set>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace kvstrata {
namespace {

constexpr uint64_t kKiB = 1024;

std::unique_ptr<SlabAllocator> Make(uint64_t slabs, uint64_t slab_bytes = 64 * kKiB) {
  return *SlabAllocator::Create(
      {.region_bytes = slabs * slab_bytes, .slab_bytes = slab_bytes, .slot_alignment = 4 * kKiB});
}

TEST(SlabAllocatorTest, RejectsBadOptions) {
  EXPECT_FALSE(SlabAllocator::Create({.region_bytes = 1, .slab_bytes = 4096}).ok());
  EXPECT_FALSE(SlabAllocator::Create({.region_bytes = 4096, .slab_bytes = 0}).ok());
}

TEST(SlabAllocatorTest, ABaseOffsetShiftsEverySlot) {
  constexpr uint64_t kBase = 8 << 20;
  auto a = *SlabAllocator::Create(
      {.region_bytes = 2 << 20, .slab_bytes = 1 << 20, .base_offset = kBase});
  SizeClassId cls = *a->ClassFor(256 << 10);
  std::vector<SlotRef> slots;
  while (std::optional<SlotHandle> h = a->Allocate(cls)) slots.push_back(h->Release());
  ASSERT_EQ(slots.size(), 8u);
  for (const SlotRef& s : slots) {
    EXPECT_GE(s.offset, kBase);
    EXPECT_LE(s.offset + s.length, kBase + (2 << 20));
  }
  for (const SlotRef& s : slots) a->Free(s);
  EXPECT_EQ(a->Stats().used_bytes, 0u);
}

TEST(SlabAllocatorTest, ClassesRoundUpAndRejectOversizedBlocks) {
  auto a = Make(2);
  SizeClassId c = *a->ClassFor(5000);
  EXPECT_EQ(a->SlotBytes(c), 8 * kKiB);
  EXPECT_EQ(*a->ClassFor(8 * kKiB), c);
  EXPECT_EQ(a->ClassFor(0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(a->ClassFor(65 * kKiB).status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(SlabAllocatorTest, SlotsAreDistinctAlignedAndInsideTheRegion) {
  auto a = Make(2);
  SizeClassId c = *a->ClassFor(16 * kKiB);
  std::vector<SlotHandle> slots;
  std::set<uint64_t> offsets;
  while (auto h = a->Allocate(c)) {
    EXPECT_EQ(h->offset() % (16 * kKiB), 0u);
    EXPECT_LT(h->offset() + h->length(), a->capacity_bytes() + 1);
    EXPECT_TRUE(offsets.insert(h->offset()).second);
    slots.push_back(*std::move(h));
  }
  EXPECT_EQ(slots.size(), 8u);  // 2 slabs x 4 slots
  EXPECT_EQ(a->Stats().used_bytes, a->capacity_bytes());
  slots.clear();  // handles free themselves
  EXPECT_EQ(a->Stats().used_bytes, 0u);
  EXPECT_EQ(a->Stats().allocated_slots, 0u);
}

// Every slot of `c`, taken out of their handles, in allocation order.
std::vector<SlotRef> AllocateAll(SlabAllocator& a, SizeClassId c) {
  std::vector<SlotRef> slots;
  while (auto h = a.Allocate(c)) slots.push_back(h->Release());
  return slots;
}

// The next slots of `c` are at `offsets`, in that order.
void ExpectNextSlotsAt(SlabAllocator& a, SizeClassId c, const std::vector<uint64_t>& offsets) {
  for (uint64_t offset : offsets) {
    std::optional<SlotHandle> h = a.Allocate(c);
    ASSERT_TRUE(h.has_value());
    EXPECT_EQ(h->offset(), offset);
    h->Release();
  }
}

// The GPU path copies a job's pieces as 2-D copies when its blocks sit in consecutive
// slots: slots come in address order, again after every slab emptied in any order.
TEST(SlabAllocatorTest, SlotsComeInAddressOrderAfterTheSlabsEmptied) {
  auto a = Make(4);
  SizeClassId c = *a->ClassFor(16 * kKiB);
  std::vector<SlotRef> slots = AllocateAll(*a, c);
  ASSERT_EQ(slots.size(), 16u);
  std::vector<uint64_t> in_order;
  for (size_t i = 0; i < slots.size(); ++i) in_order.push_back(i * 16 * kKiB);
  for (size_t i = 0; i < slots.size(); ++i) EXPECT_EQ(slots[i].offset, in_order[i]);
  for (size_t i : {5, 0, 14, 3, 9, 12, 1, 7, 15, 2, 11, 6, 13, 8, 4, 10}) a->Free(slots[i]);
  ExpectNextSlotsAt(*a, c, in_order);
}

// With holes in several slabs, the lowest slab's holes are filled first.
TEST(SlabAllocatorTest, TheLowestSlabWithRoomIsFilledFirst) {
  auto a = Make(3);
  SizeClassId c = *a->ClassFor(16 * kKiB);
  std::vector<SlotRef> slots = AllocateAll(*a, c);
  ASSERT_EQ(slots.size(), 12u);
  for (size_t i : {9, 1, 5}) a->Free(slots[i]);  // One hole in each slab.
  ExpectNextSlotsAt(*a, c, {1 * 16 * kKiB, 5 * 16 * kKiB, 9 * 16 * kKiB});
}

// Slots freed one by one in a slab that stays in use come back lowest first, whatever order
// they were freed in: a job reserved into them gets ascending slots (2-D copies on the GPU).
TEST(SlabAllocatorTest, FreedSlotsOfAPartlyUsedSlabComeBackInAddressOrder) {
  auto a = Make(1);
  SizeClassId c = *a->ClassFor(4 * kKiB);
  std::vector<SlotRef> slots = AllocateAll(*a, c);
  ASSERT_EQ(slots.size(), 16u);
  for (size_t i : {9, 10, 11, 12, 13, 3, 7}) a->Free(slots[i]);  // slot 0 stays in use
  ExpectNextSlotsAt(*a, c,
                    {3 * 4 * kKiB, 7 * 4 * kKiB, 9 * 4 * kKiB, 10 * 4 * kKiB, 11 * 4 * kKiB,
                     12 * 4 * kKiB, 13 * 4 * kKiB});
}

TEST(SlabAllocatorTest, ReleasedSlotIsFreedExplicitly) {
  auto a = Make(1);
  SizeClassId c = *a->ClassFor(64 * kKiB);
  SlotRef ref = a->Allocate(c)->Release();
  EXPECT_FALSE(a->Allocate(c).has_value());
  a->Free(ref);
  EXPECT_TRUE(a->Allocate(c).has_value());
}

TEST(SlabAllocatorTest, EmptySlabMovesToAStarvingClass) {
  auto a = Make(2);
  SizeClassId small = *a->ClassFor(16 * kKiB);
  SizeClassId big = *a->ClassFor(32 * kKiB);
  std::vector<SlotHandle> smalls;
  while (auto h = a->Allocate(small)) smalls.push_back(*std::move(h));
  ASSERT_EQ(smalls.size(), 8u);  // both slabs went to the small class
  EXPECT_FALSE(a->Allocate(big).has_value());
  // Free one slab's worth of small slots: that slab is empty and may move.
  uint64_t slab_of_first = smalls[0].offset() / (64 * kKiB);
  std::erase_if(smalls,
                [&](const SlotHandle& h) { return h.offset() / (64 * kKiB) == slab_of_first; });
  ASSERT_EQ(smalls.size(), 4u);
  std::optional<SlotHandle> b1 = a->Allocate(big);
  ASSERT_TRUE(b1.has_value());
  EXPECT_EQ(b1->offset() / (64 * kKiB), slab_of_first);
  EXPECT_EQ(a->Stats().slab_moves, 1u);
  EXPECT_TRUE(a->Allocate(big).has_value());
  EXPECT_FALSE(a->Allocate(small).has_value());  // the other slab is full
}

TEST(SlabAllocatorTest, PartlyUsedSlabDoesNotMove) {
  auto a = Make(1);
  SizeClassId small = *a->ClassFor(16 * kKiB);
  SizeClassId big = *a->ClassFor(32 * kKiB);
  std::optional<SlotHandle> one = a->Allocate(small);
  ASSERT_TRUE(one.has_value());
  EXPECT_FALSE(a->Allocate(big).has_value());
  one.reset();
  EXPECT_TRUE(a->Allocate(big).has_value());
}

TEST(SlabAllocatorTest, ConcurrentAllocateAndFree) {
  auto a = Make(8);
  SizeClassId c = *a->ClassFor(4 * kKiB);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int round = 0; round < 200; ++round) {
        std::vector<SlotHandle> mine;
        for (int i = 0; i < 16; ++i) {
          if (auto h = a->Allocate(c)) mine.push_back(*std::move(h));
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(a->Stats().used_bytes, 0u);
}

}  // namespace
}  // namespace kvstrata
