// Geometry and request checks and copy planning: plain C++, no GPU needed.
#include "daemon/transfer/transfer_validation.h"

#include <algorithm>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvstrata {

// For the matchers (ADL finds it in PieceCopy's namespace).
bool operator==(const PieceCopy& a, const PieceCopy& b) {
  return a.gpu == b.gpu && a.host == b.host && a.bytes == b.bytes;
}
bool operator==(const StridedCopy& a, const StridedCopy& b) {
  return a.gpu == b.gpu && a.host == b.host && a.bytes == b.bytes && a.gpu_pitch == b.gpu_pitch &&
         a.host_pitch == b.host_pitch && a.rows == b.rows;
}

namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

constexpr uint64_t kKiB = 1024;
constexpr uint32_t kBlocks = 100;

// vLLM per-layer geometry: `layers` x {K, V} tensors, piece `piece` bytes, blocks packed.
CudaMemorySpec PerLayer(uint32_t layers, uint64_t piece) {
  CudaMemorySpec spec;
  spec.gpu_uuid = "GPU-00000000-0000-0000-0000-000000000000";
  spec.num_blocks = kBlocks;
  for (uint32_t layer = 0; layer < layers; ++layer) {
    for (uint32_t kv = 0; kv < 2; ++kv) {
      CudaTensorSpec t;
      t.ipc_handle[0] = 1;
      t.allocation_bytes = kBlocks * piece;
      t.block_stride = piece;
      t.piece_bytes = piece;
      t.layer = layer;
      t.kv_index = kv;
      spec.tensors.push_back(t);
    }
  }
  return spec;
}

std::string Message(const absl::Status& status) { return std::string(status.message()); }

TEST(ValidateGeometryTest, AcceptsPerLayerAndCrossLayer) {
  EXPECT_TRUE(ValidateGeometry(PerLayer(32, 32 * kKiB), 64 * 32 * kKiB).ok());
  CudaMemorySpec cross = PerLayer(1, 2048 * kKiB);
  cross.tensors.resize(1);
  EXPECT_TRUE(ValidateGeometry(cross, 2048 * kKiB).ok());
}

TEST(ValidateGeometryTest, PiecesMustAddUpToBlockBytes) {
  absl::Status status = ValidateGeometry(PerLayer(2, 16 * kKiB), 65 * kKiB);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(status), HasSubstr("add up to"));
}

TEST(ValidateGeometryTest, LastBlockMustFitTheAllocation) {
  CudaMemorySpec spec = PerLayer(1, 16 * kKiB);
  spec.tensors[1].base_offset = 1;
  absl::Status status = ValidateGeometry(spec, 32 * kKiB);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(status), HasSubstr("tensor 1"));
  EXPECT_THAT(Message(status), HasSubstr("past the allocation"));
}

TEST(ValidateGeometryTest, RejectsZeroSizesOverlapAndOverflow) {
  CudaMemorySpec spec = PerLayer(1, 16 * kKiB);
  EXPECT_FALSE(ValidateGeometry(spec, 0).ok());
  spec.num_blocks = 0;
  EXPECT_FALSE(ValidateGeometry(spec, 32 * kKiB).ok());
  spec = PerLayer(1, 16 * kKiB);
  spec.tensors[0].piece_bytes = 0;
  spec.tensors[1].piece_bytes = 32 * kKiB;
  EXPECT_FALSE(ValidateGeometry(spec, 32 * kKiB).ok());
  spec = PerLayer(1, 16 * kKiB);
  spec.tensors[0].block_stride = 8 * kKiB;
  EXPECT_THAT(Message(ValidateGeometry(spec, 32 * kKiB)), HasSubstr("overlap"));
  spec = PerLayer(1, 16 * kKiB);
  spec.tensors[0].block_stride = UINT64_MAX / 2;
  EXPECT_THAT(Message(ValidateGeometry(spec, 32 * kKiB)), HasSubstr("overflow"));
  spec = PerLayer(1, 16 * kKiB);
  spec.tensors[0].piece_bytes = UINT64_MAX;
  EXPECT_FALSE(ValidateGeometry(spec, 32 * kKiB).ok());
  spec.tensors.clear();
  EXPECT_FALSE(ValidateGeometry(spec, 32 * kKiB).ok());
}

TEST(ValidateIpcHandlesTest, RejectsEmptyHandles) {
  CudaMemorySpec spec = PerLayer(1, 16 * kKiB);
  EXPECT_TRUE(ValidateIpcHandles(spec).ok());
  spec.ipc_events.push_back({});
  EXPECT_THAT(Message(ValidateIpcHandles(spec)), HasSubstr("event 0"));
  spec.ipc_events.clear();
  spec.tensors[1].ipc_handle = {};
  EXPECT_THAT(Message(ValidateIpcHandles(spec)), HasSubstr("tensor 1"));
}

RequestLimits Limits() { return {kBlocks, 2, 64 * kKiB, 1024 * kKiB, 8}; }

TransferRequest Request(CopyDirection direction, std::vector<BlockCopy> blocks) {
  TransferRequest request;
  request.direction = direction;
  request.blocks = std::move(blocks);
  return request;
}

TEST(ValidateRequestTest, AcceptsValidAndEmptyRequests) {
  EXPECT_TRUE(
      ValidateRequest(Request(CopyDirection::kDown, {{0, 0}, {99, 960 * kKiB}}), Limits()).ok());
  EXPECT_TRUE(ValidateRequest(Request(CopyDirection::kUp, {}), Limits()).ok());
}

TEST(ValidateRequestTest, RejectsBadIdsSlotsEventsAndCounts) {
  auto store = CopyDirection::kDown;
  EXPECT_THAT(Message(ValidateRequest(Request(store, {{100, 0}}), Limits())),
              HasSubstr("num_blocks"));
  EXPECT_THAT(Message(ValidateRequest(Request(store, {{0, 961 * kKiB}}), Limits())),
              HasSubstr("past the L1 region"));
  EXPECT_FALSE(ValidateRequest(Request(store, {{0, UINT64_MAX - 10}}), Limits()).ok());
  TransferRequest with_event = Request(store, {{0, 0}});
  with_event.wait_event = 2;
  EXPECT_THAT(Message(ValidateRequest(with_event, Limits())), HasSubstr("wait_event"));
  std::vector<BlockCopy> many(9);
  for (uint32_t i = 0; i < 9; ++i) many[i] = {i, i * 64 * kKiB};
  EXPECT_THAT(Message(ValidateRequest(Request(store, many), Limits())), HasSubstr("at most"));
}

TEST(ValidateRequestTest, RejectsDestinationsWrittenTwice) {
  EXPECT_THAT(
      Message(ValidateRequest(Request(CopyDirection::kUp, {{3, 0}, {3, 64 * kKiB}}), Limits())),
      HasSubstr("loaded twice"));
  EXPECT_THAT(Message(ValidateRequest(Request(CopyDirection::kDown, {{3, 0}, {4, 0}}), Limits())),
              HasSubstr("stored twice"));
  // Storing one block into two slots, or loading one slot into two blocks, is fine.
  EXPECT_TRUE(
      ValidateRequest(Request(CopyDirection::kDown, {{3, 0}, {3, 64 * kKiB}}), Limits()).ok());
  EXPECT_TRUE(ValidateRequest(Request(CopyDirection::kUp, {{3, 0}, {4, 0}}), Limits()).ok());
}

TEST(PlanCopiesTest, PiecesGoBackToBackInTensorOrder) {
  std::vector<TensorLayout> tensors = {{0x10000, 0x100, 0x40}, {0x90000, 0x200, 0x80}};
  std::vector<PieceCopy> pieces = PlanCopies(tensors, {{2, 0x1000}, {0, 0x5000}}, 0x100000);
  EXPECT_THAT(pieces,
              ElementsAre(PieceCopy{0x10200, 0x101000, 0x40}, PieceCopy{0x90400, 0x101040, 0x80},
                          PieceCopy{0x10000, 0x105000, 0x40}, PieceCopy{0x90000, 0x105040, 0x80}));
}

TEST(PlanCopiesTest, MergesContiguousCrossLayerBlocks) {
  std::vector<TensorLayout> tensors = {{0x10000, 0x1000, 0x1000}};
  std::vector<PieceCopy> pieces = PlanCopies(tensors, {{4, 0}, {5, 0x1000}, {7, 0x2000}}, 0);
  EXPECT_THAT(pieces,
              ElementsAre(PieceCopy{0x14000, 0, 0x2000}, PieceCopy{0x17000, 0x2000, 0x1000}));
}

TEST(ValidateRequestTest, LayerFlagValueNeedsALoadFlagsAndAValue) {
  RequestLimits limits = Limits();
  TransferRequest load = Request(CopyDirection::kUp, {{0, 0}});
  load.layer_flag_value = 7;
  EXPECT_THAT(Message(ValidateRequest(load, limits)), HasSubstr("no layer_flags"));
  limits.layer_flags = true;
  EXPECT_TRUE(ValidateRequest(load, limits).ok());
  load.layer_flag_value = 0;
  EXPECT_THAT(Message(ValidateRequest(load, limits)), HasSubstr("must be > 0"));
  TransferRequest store = Request(CopyDirection::kDown, {{0, 0}});
  store.layer_flag_value = 7;
  EXPECT_THAT(Message(ValidateRequest(store, limits)), HasSubstr("loads only"));
}

TEST(ValidateGeometryTest, LayerFlagsMustBeAlignedAndInside) {
  CudaMemorySpec spec;
  spec.num_blocks = 4;
  spec.tensors = {{{1}, 0, 4096, 1024, 1024, 0, 0}, {{2}, 0, 4096, 1024, 1024, 1, 0}};
  spec.layer_flags = CudaLayerFlagsSpec{{3}, 8, 24};  // 2 layers: 16 bytes at 8
  EXPECT_TRUE(ValidateGeometry(spec, 2048).ok());
  EXPECT_EQ(SpecLayers(spec), 2u);
  spec.layer_flags->offset = 12;
  EXPECT_THAT(Message(ValidateGeometry(spec, 2048)), HasSubstr("8-aligned"));
  spec.layer_flags->offset = 16;  // 16 + 16 > 24
  EXPECT_THAT(Message(ValidateGeometry(spec, 2048)), HasSubstr("inside"));
  spec.layer_flags->offset = 8;
  spec.layer_flags->ipc_handle = {};
  EXPECT_THAT(Message(ValidateIpcHandles(spec)), HasSubstr("layer_flags"));
}

TEST(PlanLayerCopiesTest, GroupsPiecesByLayerInBlockOrder) {
  // Layer 1's K and V are adjacent in memory (one allocation), layer 0 is K and V apart;
  // the tensors are not listed in layer order.
  std::vector<TensorLayout> tensors = {
      {0x90000, 0x100, 0x40, 1}, {0x10000, 0x100, 0x40, 0}, {0x20000, 0x100, 0x40, 0}};
  std::vector<size_t> bounds;
  std::vector<PieceCopy> pieces =
      PlanLayerCopies(tensors, {{2, 0x1000}, {0, 0x5000}}, 0x100000, &bounds);
  EXPECT_THAT(TensorLayers(tensors), ElementsAre(0u, 1u));
  EXPECT_THAT(bounds, ElementsAre(0u, 4u, 6u));
  EXPECT_THAT(pieces, ElementsAre(
                          // layer 0: block 2 (slot 0x1000), then block 0 (slot 0x5000)
                          PieceCopy{0x10200, 0x101040, 0x40}, PieceCopy{0x20200, 0x101080, 0x40},
                          PieceCopy{0x10000, 0x105040, 0x40}, PieceCopy{0x20000, 0x105080, 0x40},
                          // layer 1
                          PieceCopy{0x90200, 0x101000, 0x40}, PieceCopy{0x90000, 0x105000, 0x40}));
}

TEST(PlanLayerCopiesTest, CrossLayerIsOneGroupAndMerges) {
  std::vector<TensorLayout> tensors = {{0x10000, 0x1000, 0x1000, 0}};
  std::vector<size_t> bounds;
  std::vector<PieceCopy> pieces = PlanLayerCopies(tensors, {{4, 0}, {5, 0x1000}}, 0, &bounds);
  EXPECT_THAT(bounds, ElementsAre(0u, 1u));
  EXPECT_THAT(pieces, ElementsAre(PieceCopy{0x14000, 0, 0x2000}));
}

TEST(GroupStridedTest, OneCopyPerTensorForConsecutiveBlocksInEvenSlots) {
  // vLLM NHD, one layer: K and V tensors (0x40-byte pieces, blocks packed); blocks 3..6 in
  // slots 0x1000 apart, planned block by block.
  std::vector<TensorLayout> tensors = {{0x10000, 0x40, 0x40, 0}, {0x20000, 0x40, 0x40, 0}};
  std::vector<PieceCopy> pieces =
      PlanCopies(tensors, {{3, 0x0}, {4, 0x1000}, {5, 0x2000}, {6, 0x3000}}, 0x100000);
  EXPECT_THAT(GroupStrided(pieces),
              ElementsAre(StridedCopy{0x100c0, 0x100000, 0x40, 0x40, 0x1000, 4},
                          StridedCopy{0x200c0, 0x100040, 0x40, 0x40, 0x1000, 4}));
}

TEST(GroupStridedTest, UnevenOrBackwardRunsStayPieces) {
  // Slots not evenly spaced: the first two rows group, the third starts over.
  EXPECT_THAT(GroupStrided({{0x0, 0x1000, 0x10}, {0x10, 0x2000, 0x10}, {0x20, 0x5000, 0x10}}),
              ElementsAre(StridedCopy{0x0, 0x1000, 0x10, 0x10, 0x1000, 2},
                          StridedCopy{0x20, 0x5000, 0x10, 0, 0, 1}));
  // Host addresses going down while GPU addresses go up: no pitch fits, one copy each.
  EXPECT_THAT(GroupStrided({{0x0, 0x3000, 0x10}, {0x10, 0x2000, 0x10}}),
              ElementsAre(StridedCopy{0x0, 0x3000, 0x10, 0, 0, 1},
                          StridedCopy{0x10, 0x2000, 0x10, 0, 0, 1}));
  // Rows that would overlap (distance below the width) and pitches over the limit.
  EXPECT_THAT(
      GroupStrided({{0x0, 0x0, 0x10}, {0x8, 0x100, 0x10}}),
      ElementsAre(StridedCopy{0x0, 0x0, 0x10, 0, 0, 1}, StridedCopy{0x8, 0x100, 0x10, 0, 0, 1}));
  EXPECT_THAT(GroupStrided({{0x0, 0x0, 0x10}, {0x10, kMaxCopyPitch + 0x10, 0x10}}),
              ElementsAre(StridedCopy{0x0, 0x0, 0x10, 0, 0, 1},
                          StridedCopy{0x10, kMaxCopyPitch + 0x10, 0x10, 0, 0, 1}));
  // Different sizes never share a copy; every byte is still copied once.
  std::vector<StridedCopy> mixed = GroupStrided({{0x0, 0x0, 0x10}, {0x100, 0x100, 0x20}});
  EXPECT_THAT(mixed, ElementsAre(StridedCopy{0x0, 0x0, 0x10, 0, 0, 1},
                                 StridedCopy{0x100, 0x100, 0x20, 0, 0, 1}));
  EXPECT_TRUE(GroupStrided({}).empty());
}

TEST(GroupStridedTest, NeverAcrossTensors) {
  // Two layers' K tensors in allocations 0x1000 apart: block 0 of each sits at the same
  // distance as consecutive blocks would, but a 2-D copy must not leave an allocation.
  std::vector<TensorLayout> tensors = {{0x10000, 0x40, 0x40, 0}, {0x11000, 0x40, 0x40, 1}};
  std::vector<PieceCopy> pieces = PlanCopies(tensors, {{0, 0x0}}, 0x100000);
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_EQ(pieces[1].tensor, 1u);
  EXPECT_THAT(GroupStrided(pieces), ElementsAre(StridedCopy{0x10000, 0x100000, 0x40, 0, 0, 1},
                                                StridedCopy{0x11000, 0x100040, 0x40, 0, 0, 1}));
  EXPECT_THAT(
      GroupStrided({{0x0, 0x0, 0x10, 0}, {0x10, 0x1000, 0x10, 1}}),
      ElementsAre(StridedCopy{0x0, 0x0, 0x10, 0, 0, 1}, StridedCopy{0x10, 0x1000, 0x10, 0, 0, 1}));
}

TEST(GroupStridedTest, OrderOfTheInputDoesNotMatter) {
  EXPECT_THAT(GroupStrided({{0x20, 0x3000, 0x10}, {0x0, 0x1000, 0x10}, {0x10, 0x2000, 0x10}}),
              ElementsAre(StridedCopy{0x0, 0x1000, 0x10, 0x10, 0x1000, 3}));
}

TEST(GroupStridedTest, APlanInBlockOrderGroupsAsTheSameBlocksInAnyOrder) {
  // Three tensors (one of 0x40-byte pieces, two of 0x20), 40 blocks in slots that skip one
  // every 16 (a slab's end): in block order the one-pass path groups them, shuffled the
  // sorting path does; both give the same copies, tensor by tensor.
  std::vector<TensorLayout> tensors = {
      {0x100000, 0x40, 0x40, 0}, {0x200000, 0x20, 0x20, 0}, {0x300000, 0x20, 0x20, 1}};
  std::vector<BlockCopy> blocks;
  for (uint32_t b = 0; b < 40; ++b) blocks.push_back({b, uint64_t{b + b / 16} * 0x80});
  std::vector<PieceCopy> in_order = PlanCopies(tensors, blocks, 0x10000000);
  std::vector<PieceCopy> shuffled = in_order;
  std::mt19937 rng(7);
  std::shuffle(shuffled.begin(), shuffled.end(), rng);
  std::vector<StridedCopy> copies = GroupStrided(in_order);
  EXPECT_EQ(copies, GroupStrided(shuffled));
  ASSERT_EQ(copies.size(), 9u);  // Three runs of slots (16, 16, 8 blocks) per tensor.
  EXPECT_EQ(copies[0], (StridedCopy{0x100000, 0x10000000, 0x40, 0x40, 0x80, 16}));
  EXPECT_EQ(copies[3], (StridedCopy{0x200000, 0x10000040, 0x20, 0x20, 0x80, 16}));
  EXPECT_EQ(copies[8],
            (StridedCopy{0x300000 + 32 * 0x20, 0x10000060 + 34 * 0x80, 0x20, 0x20, 0x80, 8}));
  // Descending block ids: the sorting path finds the same groups as ascending ones.
  std::vector<BlockCopy> backwards(blocks.rbegin(), blocks.rend());
  EXPECT_EQ(GroupStrided(PlanCopies(tensors, backwards, 0x10000000)), copies);
  // Two sizes in one tensor: sorted by size first, as before.
  EXPECT_THAT(GroupStrided({{0x0, 0x1000, 0x20}, {0x40, 0x2000, 0x10}, {0x80, 0x3000, 0x20}}),
              ElementsAre(StridedCopy{0x40, 0x2000, 0x10, 0, 0, 1},
                          StridedCopy{0x0, 0x1000, 0x20, 0x80, 0x2000, 2}));
}

TEST(SplitPiecesTest, CutsLongPieces) {
  EXPECT_THAT(SplitPieces({{0, 100, 10}, {50, 200, 4}}, 4),
              ElementsAre(PieceCopy{0, 100, 4}, PieceCopy{4, 104, 4}, PieceCopy{8, 108, 2},
                          PieceCopy{50, 200, 4}));
}

TEST(PartitionByBytesTest, EqualRunsOfAtLeastTheMinimum) {
  std::vector<PieceCopy> hundred(100, PieceCopy{0, 0, 1});
  EXPECT_THAT(PartitionByBytes(hundred, 4, 10), ElementsAre(0u, 25u, 50u, 75u, 100u));
  EXPECT_THAT(PartitionByBytes(hundred, 4, 40), ElementsAre(0u, 50u, 100u));  // 2 runs of 50
  EXPECT_THAT(PartitionByBytes(hundred, 4, 1000), ElementsAre(0u, 100u));     // too small
  EXPECT_THAT(PartitionByBytes(hundred, 1, 1), ElementsAre(0u, 100u));
}

TEST(PartitionByBytesTest, UnevenPiecesAndFewPieces) {
  // One big piece and small ones: a run is never empty, runs are cut on piece borders.
  std::vector<PieceCopy> pieces = {{0, 0, 90}, {0, 0, 5}, {0, 0, 5}};
  EXPECT_THAT(PartitionByBytes(pieces, 4, 1), ElementsAre(0u, 1u, 2u, 3u));
  EXPECT_THAT(PartitionByBytes({{0, 0, 64}}, 4, 1), ElementsAre(0u, 1u));
  EXPECT_THAT(PartitionByBytes({}, 4, 1), ElementsAre(0u));
}

// Every row of `copies` as (gpu, host, bytes), in order: what a partition must keep.
std::vector<std::tuple<uint64_t, uint64_t, uint64_t>> Rows(absl::Span<const StridedCopy> copies) {
  std::vector<std::tuple<uint64_t, uint64_t, uint64_t>> rows;
  for (const StridedCopy& c : copies) {
    for (uint64_t r = 0; r < c.rows; ++r) {
      rows.emplace_back(c.gpu + r * c.gpu_pitch, c.host + r * c.host_pitch, c.bytes);
    }
  }
  return rows;
}

TEST(PartitionStridedTest, CutsCopiesOnlyWhereARunsShareEnds) {
  // 32 tensors (MLA's layers) of 512 blocks in even slots, planned block by block: 32 copies
  // of 512 rows. Four runs: each takes 8 whole copies, none is cut.
  std::vector<TensorLayout> tensors;
  for (uint64_t t = 0; t < 32; ++t) tensors.push_back({0x100000000 * (t + 1), 0x4800, 0x4800, 0});
  std::vector<BlockCopy> blocks;
  for (uint32_t b = 0; b < 512; ++b) blocks.push_back({b, uint64_t{b} * 32 * 0x4800});
  std::vector<StridedCopy> copies = GroupStrided(PlanCopies(tensors, blocks, 0x10000000));
  ASSERT_EQ(copies.size(), 32u);
  std::vector<std::vector<StridedCopy>> runs = PartitionStrided(copies, 4, 1);
  ASSERT_EQ(runs.size(), 4u);
  std::vector<StridedCopy> joined;
  for (const auto& run : runs) {
    EXPECT_EQ(run.size(), 8u);
    for (const StridedCopy& c : run) EXPECT_EQ(c.rows, 512u);
    joined.insert(joined.end(), run.begin(), run.end());
  }
  EXPECT_EQ(Rows(joined), Rows(copies));
  // Cutting the pieces first (block order) would have cut every copy at every run's end.
  std::vector<PieceCopy> pieces = PlanCopies(tensors, blocks, 0x10000000);
  std::vector<size_t> bounds = PartitionByBytes(pieces, 4, 1);
  size_t old_copies = 0;
  for (size_t i = 0; i + 1 < bounds.size(); ++i) {
    old_copies +=
        GroupStrided(absl::MakeSpan(pieces).subspan(bounds[i], bounds[i + 1] - bounds[i])).size();
  }
  EXPECT_EQ(old_copies, 128u);
}

TEST(PartitionStridedTest, OneTallCopyIsCutIntoEqualRuns) {
  // Cross-layer: one tensor, one copy of 100 rows of 0x10 bytes, three runs.
  std::vector<StridedCopy> one = {{0x1000, 0x90000, 0x10, 0x20, 0x100, 100}};
  std::vector<std::vector<StridedCopy>> runs = PartitionStrided(one, 3, 1);
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_THAT(runs[0], ElementsAre(StridedCopy{0x1000, 0x90000, 0x10, 0x20, 0x100, 34}));
  EXPECT_THAT(runs[1], ElementsAre(StridedCopy{0x1000 + 34 * 0x20, 0x90000 + 34 * 0x100, 0x10, 0x20,
                                               0x100, 33}));
  EXPECT_THAT(runs[2], ElementsAre(StridedCopy{0x1000 + 67 * 0x20, 0x90000 + 67 * 0x100, 0x10, 0x20,
                                               0x100, 33}));
}

TEST(PartitionStridedTest, SmallJobsBigPiecesAndNothing) {
  std::vector<StridedCopy> copies = {
      {0x0, 0x0, 90, 0, 0, 1}, {0x100, 0x100, 5, 0, 0, 1}, {0x200, 0x200, 5, 0, 0, 1}};
  // Under the minimum: one run.
  EXPECT_THAT(PartitionStrided(copies, 4, 1000), ElementsAre(ElementsAreArray(copies)));
  // A piece bigger than several shares fills them: no empty runs, every piece once, in order.
  std::vector<std::vector<StridedCopy>> runs = PartitionStrided(copies, 4, 1);
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_THAT(runs[0], ElementsAre(copies[0]));
  EXPECT_THAT(runs[1], ElementsAre(copies[1]));
  EXPECT_THAT(runs[2], ElementsAre(copies[2]));
  // A cut leaving one row: a plain piece (pitches 0).
  std::vector<std::vector<StridedCopy>> two =
      PartitionStrided({{0x0, 0x0, 0x10, 0x10, 0x40, 3}, {0x800, 0x800, 0x10, 0, 0, 1}}, 2, 1);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_THAT(two[0], ElementsAre(StridedCopy{0x0, 0x0, 0x10, 0x10, 0x40, 2}));
  EXPECT_THAT(two[1], ElementsAre(StridedCopy{0x20, 0x80, 0x10, 0, 0, 1},
                                  StridedCopy{0x800, 0x800, 0x10, 0, 0, 1}));
  EXPECT_TRUE(PartitionStrided({}, 4, 1).empty());
  EXPECT_EQ(PartitionStrided(copies, 0, 0).size(), 1u);  // max_parts 0 counts as 1
}

TEST(ResolveStrategyTest, AutoPicksStagedCopiesForSmallPieces) {
  const CopyDirection load = CopyDirection::kUp;
  EXPECT_EQ(ResolveStrategy(CopyStrategy::kAuto, load, 16 * kKiB, 256 * kKiB),
            CopyStrategy::kStaged);
  EXPECT_EQ(ResolveStrategy(CopyStrategy::kAuto, load, 256 * kKiB, 256 * kKiB),
            CopyStrategy::kBatch);
  EXPECT_EQ(ResolveStrategy(CopyStrategy::kMemcpyLoop, load, 1, 256 * kKiB),
            CopyStrategy::kMemcpyLoop);
}

TEST(ResolveStrategyTest, AutoStoresByDmaWhateverThePieces) {
  // A staged store's gather kernel shares the engine's SMs with its forward pass.
  const CopyDirection store = CopyDirection::kDown;
  EXPECT_EQ(ResolveStrategy(CopyStrategy::kAuto, store, 16 * kKiB, 256 * kKiB),
            CopyStrategy::kBatch);
  EXPECT_EQ(ResolveStrategy(CopyStrategy::kStaged, store, 16 * kKiB, 256 * kKiB),
            CopyStrategy::kStaged);
  EXPECT_STREQ(CopyStrategyName(CopyStrategy::kKernel), "kernel");
  EXPECT_STREQ(CopyStrategyName(CopyStrategy::kStaged), "staged");
  EXPECT_EQ(CopyStrategyFromName("loop"), CopyStrategy::kMemcpyLoop);
  EXPECT_EQ(CopyStrategyFromName("fast"), std::nullopt);
}

TEST(PlanStagedTest, PiecesAreOffsetsInsideEachSlot) {
  // Two tensors (K and V of one layer), 4 KiB pieces, blocks 7 and 2 into slots at 0x10000
  // and 0x20000 of a region based at 1 << 40.
  std::vector<TensorLayout> tensors = {{1000000, 4096, 4096}, {9000000, 4096, 4096}};
  StagedPlan plan = PlanStaged(tensors, {{7, 0x10000}, {2, 0x20000}}, 1ULL << 40, 8192);
  EXPECT_EQ(plan.block_bytes, 8192u);
  EXPECT_THAT(plan.slots, ElementsAre((1ULL << 40) + 0x10000, (1ULL << 40) + 0x20000));
  EXPECT_THAT(plan.first_piece, ElementsAre(0u, 2u, 4u));
  EXPECT_THAT(plan.pieces, ElementsAre(PieceCopy{1000000 + 7 * 4096, 0, 4096},
                                       PieceCopy{9000000 + 7 * 4096, 4096, 4096},
                                       PieceCopy{1000000 + 2 * 4096, 0, 4096},
                                       PieceCopy{9000000 + 2 * 4096, 4096, 4096}));
}

// Consecutive blocks contiguous on the GPU (one tensor, cross-layer) stay one piece each:
// every block's pieces are offsets inside its own slot.
TEST(PlanStagedTest, BlocksNeverMergeAcrossSlots) {
  std::vector<TensorLayout> tensors = {{1000000, 8192, 8192}};
  StagedPlan plan = PlanStaged(tensors, {{3, 0x10000}, {4, 0x12000}, {5, 0x14000}}, 0, 8192);
  EXPECT_THAT(plan.first_piece, ElementsAre(0u, 1u, 2u, 3u));
  EXPECT_THAT(plan.pieces, ElementsAre(PieceCopy{1000000 + 3 * 8192, 0, 8192},
                                       PieceCopy{1000000 + 4 * 8192, 0, 8192},
                                       PieceCopy{1000000 + 5 * 8192, 0, 8192}));
}

// A lane plans a staged job run by run: the slots first, then each run's pieces just
// before it issues the run. Range by range gives the plan of the whole job at once.
TEST(PlanStagedTest, RangeByRangeIsTheWholePlan) {
  std::vector<TensorLayout> tensors = {{1000000, 4096, 4096}, {9000000, 4096, 4096}};
  std::vector<BlockCopy> blocks = {{7, 0x10000}, {2, 0x20000}, {5, 0x30000}, {1, 0x40000}};
  StagedPlan whole = PlanStaged(tensors, blocks, 1ULL << 40, 8192);
  StagedPlan ranged = PlanStagedSlots(blocks, 1ULL << 40, 8192);
  EXPECT_EQ(ranged.slots, whole.slots);
  EXPECT_THAT(ranged.first_piece, ElementsAre(0u));
  EXPECT_TRUE(ranged.pieces.empty());
  PlanStagedBlocks(tensors, blocks, 0, 1, &ranged);
  EXPECT_THAT(ranged.first_piece, ElementsAre(0u, 2u));
  PlanStagedBlocks(tensors, blocks, 1, 3, &ranged);
  PlanStagedBlocks(tensors, blocks, 3, 4, &ranged);
  EXPECT_EQ(ranged.first_piece, whole.first_piece);
  EXPECT_EQ(ranged.pieces, whole.pieces);
  EXPECT_EQ(ranged.block_bytes, whole.block_bytes);
}

}  // namespace
}  // namespace kvstrata
