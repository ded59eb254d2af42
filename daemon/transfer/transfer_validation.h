// Checks and copy planning shared by every TransferEngine build, in plain C++ so that
// they are tested on machines without a GPU (tests/unit/transfer/). Stateless; thread-safe.
#ifndef KVSTRATA_DAEMON_TRANSFER_TRANSFER_VALIDATION_H_
#define KVSTRATA_DAEMON_TRANSFER_TRANSFER_VALIDATION_H_

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "daemon/transfer/transfer_engine.h"

namespace kvstrata {

// INVALID_ARGUMENT unless every tensor's blocks lie inside its allocation, blocks do not
// overlap, all sizes are non-zero, the pieces add up to `block_bytes` and the layer flags
// (if any: one 8-byte word per layer, 8-aligned) lie inside their allocation.
absl::Status ValidateGeometry(const CudaMemorySpec& spec, uint64_t block_bytes);

// INVALID_ARGUMENT for an all-zero IPC memory or event handle (never a valid export).
absl::Status ValidateIpcHandles(const CudaMemorySpec& spec);

// How many distinct `layer` values the spec's tensors have.
size_t SpecLayers(const CudaMemorySpec& spec);

struct RequestLimits {
  uint32_t num_blocks = 0;   // Of the registration.
  size_t num_events = 0;     // Of the registration.
  uint64_t block_bytes = 0;  // One L1 slot.
  uint64_t host_bytes = 0;   // The L1 region.
  uint32_t max_blocks = 0;   // Per transfer.
  bool layer_flags = false;  // The registration has layer flags.
};

// INVALID_ARGUMENT for a block id >= num_blocks, a slot outside the region, an event
// index out of range, layer_flag_value on a store or without layer flags (or 0),
// too many blocks, or a destination written twice (the same block id
// in a load, the same slot in a store).
absl::Status ValidateRequest(const TransferRequest& request, const RequestLimits& limits);

// Where one tensor's block 0 starts (an address on the GPU) and how blocks step.
struct TensorLayout {
  uint64_t block0 = 0;  // Allocation address + base_offset.
  uint64_t block_stride = 0;
  uint64_t piece_bytes = 0;
  uint32_t layer = 0;  // CudaTensorSpec.layer.
};

// One contiguous copy between GPU address `gpu` and host address `host`.
struct PieceCopy {
  uint64_t gpu = 0;
  uint64_t host = 0;
  uint64_t bytes = 0;
  // The registration's tensor the piece starts in: copies never group pieces of different
  // tensors (their allocations differ, and a 2-D copy must stay inside one).
  uint32_t tensor = 0;
};

// The pieces of `blocks`, slot layout as in transfer_engine.h (a block's pieces back to
// back in tensor order from host_base + host_offset). Pieces contiguous on both sides are
// merged (cross-layer blocks in consecutive slots become one copy).
std::vector<PieceCopy> PlanCopies(const std::vector<TensorLayout>& tensors,
                                  const std::vector<BlockCopy>& blocks, uint64_t host_base);

// The distinct `layer` values of the tensors (ascending): a registration's layers.
std::vector<uint32_t> TensorLayers(const std::vector<TensorLayout>& tensors);

// As PlanCopies, but grouped by layer: the pieces of every block for the first of
// TensorLayers(tensors), then the second, ... (blocks in order within a layer).
// *layer_bounds gets the group boundaries [0, b1, ..., pieces.size()], one group per layer.
std::vector<PieceCopy> PlanLayerCopies(const std::vector<TensorLayout>& tensors,
                                       const std::vector<BlockCopy>& blocks, uint64_t host_base,
                                       std::vector<size_t>* layer_bounds);

// Blocks for kStaged: each block's pieces with `host` = offset inside its L1 slot.
struct StagedPlan {
  uint64_t block_bytes = 0;
  std::vector<uint64_t> slots;        // Host address of each block's slot.
  std::vector<PieceCopy> pieces;      // Grouped by block, in block order.
  std::vector<uint32_t> first_piece;  // Block i owns pieces [first_piece[i], first_piece[i+1]).
  size_t max_pieces = 0;              // At least pieces.size() once every block is planned.
};
// Every block's slot and pieces.
StagedPlan PlanStaged(const std::vector<TensorLayout>& tensors,
                      const std::vector<BlockCopy>& blocks, uint64_t host_base,
                      uint64_t block_bytes);
// Only the slots (first_piece = {0}, no pieces): PlanStagedBlocks adds the pieces of the
// blocks range by range, so that a lane can issue the first blocks' copies before it has
// planned the rest.
StagedPlan PlanStagedSlots(const std::vector<BlockCopy>& blocks, uint64_t host_base,
                           uint64_t block_bytes);
// Adds the pieces of blocks [first, end); `first` must be the number of blocks planned so
// far (plan->first_piece.size() - 1).
void PlanStagedBlocks(const std::vector<TensorLayout>& tensors,
                      const std::vector<BlockCopy>& blocks, size_t first, size_t end,
                      StagedPlan* plan);

// Splits pieces longer than `max_bytes` (for the copy kernel's load balance).
std::vector<PieceCopy> SplitPieces(absl::Span<const PieceCopy> pieces, uint64_t max_bytes);

// One 2-D copy (cudaMemcpy2DAsync): `rows` rows of `bytes`, row i at gpu + i * gpu_pitch
// and host + i * host_pitch. rows == 1 is a plain piece (pitches 0).
struct StridedCopy {
  uint64_t gpu = 0;
  uint64_t host = 0;
  uint64_t bytes = 0;
  uint64_t gpu_pitch = 0;
  uint64_t host_pitch = 0;
  uint64_t rows = 1;
};
// The largest pitch a strided copy uses (CUDA refuses pitches above cudaDevAttrMaxPitch,
// 2 GiB - 1 on current GPUs).
inline constexpr uint64_t kMaxCopyPitch = 1ULL << 30;
// The pieces as 2-D copies: ordered by tensor, size, then GPU address, runs of one tensor's
// equal-sized pieces whose addresses advance by one constant pitch on each side (bytes <=
// pitch <= kMaxCopyPitch) become one copy -- one tensor's pieces of consecutive block ids in
// evenly spaced L1 slots are one call instead of one per block. Same bytes, any order.
std::vector<StridedCopy> GroupStrided(absl::Span<const PieceCopy> pieces);

// Cuts one transfer into runs that copy on separate streams: at most `max_parts` runs of
// about equal bytes, none planned under `min_part_bytes` (one run when the whole is
// smaller). Returns the boundaries [0, b1, ..., pieces.size()] (b_i strictly increasing).
std::vector<size_t> PartitionByBytes(absl::Span<const PieceCopy> pieces, size_t max_parts,
                                     uint64_t min_part_bytes);

// The same for 2-D copies (GroupStrided's, in its order): at most `max_parts` runs of about
// equal bytes, none planned under `min_part_bytes`. A copy is cut, by rows, only where a run's
// share of the bytes ends inside it, so every copy stays whole but for at most max_parts - 1
// cuts in all (cutting the pieces first, in block order, would cut every tensor's copies at
// every run's end: shorter 2-D copies, which the copy engine moves slower). Empty runs are
// left out; the runs hold every row of `copies` once, in order.
std::vector<std::vector<StridedCopy>> PartitionStrided(absl::Span<const StridedCopy> copies,
                                                       size_t max_parts, uint64_t min_part_bytes);

// kAuto -> stores: kBatch; loads: kStaged when max_piece_bytes < kernel_max_piece_bytes,
// else kBatch. Any other request is kept.
CopyStrategy ResolveStrategy(CopyStrategy requested, CopyDirection direction,
                             uint64_t max_piece_bytes, uint64_t kernel_max_piece_bytes);

const char* CopyStrategyName(CopyStrategy strategy);
// The strategy CopyStrategyName calls `name`; nullopt for any other name.
std::optional<CopyStrategy> CopyStrategyFromName(std::string_view name);

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_TRANSFER_TRANSFER_VALIDATION_H_
