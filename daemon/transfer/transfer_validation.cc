#include "daemon/transfer/transfer_validation.h"

#include <algorithm>
#include <optional>
#include <string>
#include <unordered_set>
#include <utility>

#include "absl/strings/str_cat.h"

namespace kvstrata {
namespace {

// a + b <= limit without overflow.
bool FitsSum(uint64_t a, uint64_t b, uint64_t limit) { return a <= limit && b <= limit - a; }

absl::Status ValidateTensor(const CudaTensorSpec& t, size_t index, uint32_t num_blocks) {
  std::string where = absl::StrCat("tensor ", index, " (layer ", t.layer, ", kv ", t.kv_index, ")");
  if (t.piece_bytes == 0 || t.allocation_bytes == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": piece_bytes and allocation_bytes must be > 0"));
  }
  if (num_blocks > 1 && t.block_stride < t.piece_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": block_stride ", t.block_stride,
                                                   " < piece_bytes ", t.piece_bytes,
                                                   " (blocks overlap)"));
  }
  uint64_t last = num_blocks - 1;
  if (t.block_stride != 0 && last > (UINT64_MAX - t.base_offset) / t.block_stride) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": block offsets overflow"));
  }
  uint64_t last_start = t.base_offset + last * t.block_stride;
  if (!FitsSum(last_start, t.piece_bytes, t.allocation_bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": block ", last, " ends past the allocation (base_offset ",
                     t.base_offset, " + ", last, " * stride ", t.block_stride, " + piece ",
                     t.piece_bytes, " > ", t.allocation_bytes, ")"));
  }
  return absl::OkStatus();
}

bool AllZero(const IpcHandleBytes& handle) {
  return std::all_of(handle.begin(), handle.end(), [](char c) { return c == 0; });
}

}  // namespace

absl::Status ValidateGeometry(const CudaMemorySpec& spec, uint64_t block_bytes) {
  if (spec.num_blocks == 0) return absl::InvalidArgumentError("num_blocks must be > 0");
  if (spec.tensors.empty()) return absl::InvalidArgumentError("no tensors");
  if (block_bytes == 0) return absl::InvalidArgumentError("block_bytes must be > 0");
  uint64_t sum = 0;
  for (size_t i = 0; i < spec.tensors.size(); ++i) {
    absl::Status status = ValidateTensor(spec.tensors[i], i, spec.num_blocks);
    if (!status.ok()) return status;
    if (!FitsSum(sum, spec.tensors[i].piece_bytes, block_bytes)) {
      return absl::InvalidArgumentError(
          absl::StrCat("pieces add up to more than block_bytes ", block_bytes));
    }
    sum += spec.tensors[i].piece_bytes;
  }
  if (sum != block_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("pieces add up to ", sum, " bytes, block_bytes is ", block_bytes));
  }
  if (spec.layer_flags.has_value()) {
    const CudaLayerFlagsSpec& f = *spec.layer_flags;
    const uint64_t bytes = 8 * uint64_t{SpecLayers(spec)};
    if (f.offset % 8 != 0 || !FitsSum(f.offset, bytes, f.allocation_bytes)) {
      return absl::InvalidArgumentError(absl::StrCat("layer_flags: ", bytes, " bytes at offset ",
                                                     f.offset, " must be 8-aligned and inside the ",
                                                     f.allocation_bytes, "-byte allocation"));
    }
  }
  return absl::OkStatus();
}

size_t SpecLayers(const CudaMemorySpec& spec) {
  std::vector<uint32_t> layers;
  for (const CudaTensorSpec& t : spec.tensors) layers.push_back(t.layer);
  std::sort(layers.begin(), layers.end());
  return static_cast<size_t>(std::unique(layers.begin(), layers.end()) - layers.begin());
}

absl::Status ValidateIpcHandles(const CudaMemorySpec& spec) {
  for (size_t i = 0; i < spec.tensors.size(); ++i) {
    if (AllZero(spec.tensors[i].ipc_handle)) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", i, ": empty IPC memory handle"));
    }
  }
  for (size_t i = 0; i < spec.ipc_events.size(); ++i) {
    if (AllZero(spec.ipc_events[i])) {
      return absl::InvalidArgumentError(absl::StrCat("event ", i, ": empty IPC event handle"));
    }
  }
  if (spec.layer_flags.has_value() && AllZero(spec.layer_flags->ipc_handle)) {
    return absl::InvalidArgumentError("layer_flags: empty IPC memory handle");
  }
  return absl::OkStatus();
}

absl::Status ValidateRequest(const TransferRequest& request, const RequestLimits& limits) {
  if (request.blocks.size() > limits.max_blocks) {
    return absl::InvalidArgumentError(absl::StrCat(
        request.blocks.size(), " blocks in one transfer, at most ", limits.max_blocks));
  }
  if (request.wait_event.has_value() && *request.wait_event >= limits.num_events) {
    return absl::InvalidArgumentError(absl::StrCat("wait_event ", *request.wait_event,
                                                   " out of range (", limits.num_events,
                                                   " events registered)"));
  }
  bool load = request.direction == CopyDirection::kUp;
  if (request.layer_flag_value.has_value()) {
    if (!load) return absl::InvalidArgumentError("layer_flag_value is for loads only");
    if (!limits.layer_flags) {
      return absl::InvalidArgumentError(
          "layer_flag_value: the registration has no layer_flags (register them for layer-wise "
          "loads)");
    }
    if (*request.layer_flag_value == 0) {
      return absl::InvalidArgumentError("layer_flag_value must be > 0");
    }
  }
  std::unordered_set<uint64_t> destinations;
  destinations.reserve(request.blocks.size());
  for (const BlockCopy& block : request.blocks) {
    if (block.block_id >= limits.num_blocks) {
      return absl::InvalidArgumentError(
          absl::StrCat("block id ", block.block_id, " >= num_blocks ", limits.num_blocks));
    }
    if (!FitsSum(block.host_offset, limits.block_bytes, limits.host_bytes)) {
      return absl::InvalidArgumentError(absl::StrCat("slot at offset ", block.host_offset,
                                                     " ends past the L1 region (",
                                                     limits.host_bytes, " bytes)"));
    }
    if (!destinations.insert(load ? block.block_id : block.host_offset).second) {
      return absl::InvalidArgumentError(
          load ? absl::StrCat("block id ", block.block_id, " loaded twice")
               : absl::StrCat("slot at offset ", block.host_offset, " stored twice"));
    }
  }
  return absl::OkStatus();
}

namespace {

// Appends one block's pieces, its slot at `host`, merging a piece into the one before it
// (already in `pieces`) where both sides are contiguous.
void AppendBlockPieces(const std::vector<TensorLayout>& tensors, uint32_t block_id, uint64_t host,
                       std::vector<PieceCopy>* pieces) {
  for (const TensorLayout& t : tensors) {
    uint64_t gpu = t.block0 + uint64_t{block_id} * t.block_stride;
    if (!pieces->empty()) {
      PieceCopy& last = pieces->back();
      if (last.gpu + last.bytes == gpu && last.host + last.bytes == host) {
        last.bytes += t.piece_bytes;
        host += t.piece_bytes;
        continue;
      }
    }
    pieces->push_back({gpu, host, t.piece_bytes, static_cast<uint32_t>(&t - tensors.data())});
    host += t.piece_bytes;
  }
}

}  // namespace

std::vector<PieceCopy> PlanCopies(const std::vector<TensorLayout>& tensors,
                                  const std::vector<BlockCopy>& blocks, uint64_t host_base) {
  std::vector<PieceCopy> pieces;
  pieces.reserve(blocks.size() * tensors.size());
  for (const BlockCopy& block : blocks) {
    AppendBlockPieces(tensors, block.block_id, host_base + block.host_offset, &pieces);
  }
  return pieces;
}

StagedPlan PlanStagedSlots(const std::vector<BlockCopy>& blocks, uint64_t host_base,
                           uint64_t block_bytes) {
  StagedPlan plan;
  plan.block_bytes = block_bytes;
  plan.slots.reserve(blocks.size());
  for (const BlockCopy& block : blocks) plan.slots.push_back(host_base + block.host_offset);
  plan.first_piece.reserve(blocks.size() + 1);
  plan.first_piece.push_back(0);
  return plan;
}

void PlanStagedBlocks(const std::vector<TensorLayout>& tensors,
                      const std::vector<BlockCopy>& blocks, size_t first, size_t end,
                      StagedPlan* plan) {
  plan->max_pieces = blocks.size() * tensors.size();  // At most one piece per tensor.
  plan->pieces.reserve(plan->max_pieces);             // Once, for the whole job.
  for (size_t b = first; b < end; ++b) {
    AppendBlockPieces(tensors, blocks[b].block_id, 0, &plan->pieces);
    plan->first_piece.push_back(static_cast<uint32_t>(plan->pieces.size()));
  }
}

StagedPlan PlanStaged(const std::vector<TensorLayout>& tensors,
                      const std::vector<BlockCopy>& blocks, uint64_t host_base,
                      uint64_t block_bytes) {
  StagedPlan plan = PlanStagedSlots(blocks, host_base, block_bytes);
  PlanStagedBlocks(tensors, blocks, 0, blocks.size(), &plan);
  return plan;
}

std::vector<uint32_t> TensorLayers(const std::vector<TensorLayout>& tensors) {
  std::vector<uint32_t> layers;
  for (const TensorLayout& t : tensors) layers.push_back(t.layer);
  std::sort(layers.begin(), layers.end());
  layers.erase(std::unique(layers.begin(), layers.end()), layers.end());
  return layers;
}

std::vector<PieceCopy> PlanLayerCopies(const std::vector<TensorLayout>& tensors,
                                       const std::vector<BlockCopy>& blocks, uint64_t host_base,
                                       std::vector<size_t>* layer_bounds) {
  std::vector<uint64_t> slot_offset;  // Of each tensor's piece inside a slot.
  uint64_t offset = 0;
  for (const TensorLayout& t : tensors) {
    slot_offset.push_back(offset);
    offset += t.piece_bytes;
  }
  std::vector<PieceCopy> pieces;
  pieces.reserve(blocks.size() * tensors.size());
  layer_bounds->assign(1, 0);
  for (uint32_t layer : TensorLayers(tensors)) {
    for (const BlockCopy& block : blocks) {
      for (size_t i = 0; i < tensors.size(); ++i) {
        const TensorLayout& t = tensors[i];
        if (t.layer != layer) continue;
        uint64_t gpu = t.block0 + uint64_t{block.block_id} * t.block_stride;
        uint64_t host = host_base + block.host_offset + slot_offset[i];
        if (pieces.size() > layer_bounds->back()) {
          PieceCopy& last = pieces.back();
          if (last.gpu + last.bytes == gpu && last.host + last.bytes == host) {
            last.bytes += t.piece_bytes;
            continue;
          }
        }
        pieces.push_back({gpu, host, t.piece_bytes, static_cast<uint32_t>(i)});
      }
    }
    layer_bounds->push_back(pieces.size());
  }
  return pieces;
}

std::vector<PieceCopy> SplitPieces(absl::Span<const PieceCopy> pieces, uint64_t max_bytes) {
  std::vector<PieceCopy> out;
  out.reserve(pieces.size());
  for (const PieceCopy& piece : pieces) {
    for (uint64_t done = 0; done < piece.bytes; done += max_bytes) {
      out.push_back({piece.gpu + done, piece.host + done, std::min(max_bytes, piece.bytes - done),
                     piece.tensor});
    }
  }
  return out;
}

namespace {

// A pitch from `from` to `to` on one side: their distance, if a 2-D copy can step it.
uint64_t StridePitch(uint64_t from, uint64_t to, uint64_t bytes) {
  if (to < from || to - from < bytes || to - from > kMaxCopyPitch) return 0;
  return to - from;
}

// Adds row `p` to `last` (a copy of the same tensor) if it continues it at the same pitches.
bool Extend(StridedCopy& last, const PieceCopy& p) {
  if (last.bytes != p.bytes) return false;
  const uint64_t gpu_end = last.gpu + (last.rows - 1) * last.gpu_pitch;
  const uint64_t host_end = last.host + (last.rows - 1) * last.host_pitch;
  const uint64_t gpu_pitch = StridePitch(gpu_end, p.gpu, p.bytes);
  const uint64_t host_pitch = StridePitch(host_end, p.host, p.bytes);
  if (gpu_pitch == 0 || host_pitch == 0) return false;
  if (last.rows > 1 && (gpu_pitch != last.gpu_pitch || host_pitch != last.host_pitch)) {
    return false;
  }
  last.gpu_pitch = gpu_pitch;
  last.host_pitch = host_pitch;
  ++last.rows;
  return true;
}

// GroupStrided in one pass over the pieces, without copying or sorting them, for the common
// plan: every tensor's pieces of one size and in ascending GPU order (ascending block ids).
// Each tensor's last copy stays open while other tensors' pieces come between its rows.
// nullopt for any other input (GroupStrided sorts that).
std::optional<std::vector<StridedCopy>> GroupInOrder(absl::Span<const PieceCopy> pieces) {
  std::vector<int64_t> open;  // By tensor: its last copy's index in `made`, or -1.
  std::vector<std::pair<uint32_t, StridedCopy>> made;  // (tensor, copy), as opened.
  for (const PieceCopy& p : pieces) {
    if (p.tensor >= open.size()) open.resize(size_t{p.tensor} + 1, -1);
    if (open[p.tensor] >= 0) {
      StridedCopy& last = made[static_cast<size_t>(open[p.tensor])].second;
      if (p.bytes != last.bytes || p.gpu <= last.gpu + (last.rows - 1) * last.gpu_pitch) {
        return std::nullopt;  // Sizes differ or not ascending: sorted by the general path.
      }
      if (Extend(last, p)) continue;
    }
    open[p.tensor] = static_cast<int64_t>(made.size());
    made.push_back({p.tensor, {p.gpu, p.host, p.bytes, 0, 0, 1}});
  }
  std::stable_sort(made.begin(), made.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<StridedCopy> copies;
  copies.reserve(made.size());
  for (const auto& m : made) copies.push_back(m.second);
  return copies;
}

}  // namespace

std::vector<StridedCopy> GroupStrided(absl::Span<const PieceCopy> pieces) {
  if (std::optional<std::vector<StridedCopy>> in_order = GroupInOrder(pieces)) {
    return *std::move(in_order);
  }
  // Ordered by tensor, size, GPU address: bucketed by tensor in input order (a plan's pieces
  // are block-major, so each bucket is usually in order already: an engine's blocks mostly
  // come with ascending ids), then each bucket sorted only where it is not.
  uint32_t tensors = 0;
  for (const PieceCopy& p : pieces) tensors = std::max(tensors, p.tensor + 1);
  std::vector<size_t> bucket(size_t{tensors} + 1, 0);
  for (const PieceCopy& p : pieces) ++bucket[p.tensor + 1];
  for (size_t t = 1; t < bucket.size(); ++t) bucket[t] += bucket[t - 1];
  std::vector<PieceCopy> sorted(pieces.size());
  {
    std::vector<size_t> next(bucket.begin(), bucket.end() - 1);
    for (const PieceCopy& p : pieces) sorted[next[p.tensor]++] = p;
  }
  auto by_size_then_gpu = [](const PieceCopy& a, const PieceCopy& b) {
    return a.bytes != b.bytes ? a.bytes < b.bytes : a.gpu < b.gpu;
  };
  for (size_t t = 0; t + 1 < bucket.size(); ++t) {
    auto first = sorted.begin() + static_cast<ptrdiff_t>(bucket[t]);
    auto last = sorted.begin() + static_cast<ptrdiff_t>(bucket[t + 1]);
    if (!std::is_sorted(first, last, by_size_then_gpu)) std::sort(first, last, by_size_then_gpu);
  }
  std::vector<StridedCopy> copies;
  for (size_t i = 0; i < sorted.size(); ++i) {
    const PieceCopy& p = sorted[i];
    if (i > 0 && sorted[i - 1].tensor == p.tensor && Extend(copies.back(), p)) continue;
    copies.push_back({p.gpu, p.host, p.bytes, 0, 0, 1});
  }
  return copies;
}

std::vector<std::vector<StridedCopy>> PartitionStrided(absl::Span<const StridedCopy> copies,
                                                       size_t max_parts, uint64_t min_part_bytes) {
  uint64_t total = 0;
  for (const StridedCopy& c : copies) total += c.bytes * c.rows;
  uint64_t parts = min_part_bytes == 0 ? max_parts : total / min_part_bytes;
  parts = std::clamp<uint64_t>(parts, 1, std::max<size_t>(max_parts, 1));
  std::vector<std::vector<StridedCopy>> runs(parts);
  // Run k ends once `done` reaches (k + 1) / parts of the bytes; the last takes the rest.
  auto boundary = [&](uint64_t k) { return (k + 1) * total / parts; };
  uint64_t k = 0;
  uint64_t done = 0;
  for (const StridedCopy& c : copies) {
    uint64_t first = 0;
    while (first < c.rows) {
      uint64_t take = c.rows - first;
      if (k + 1 < parts && c.bytes > 0) {
        // The rows that reach this run's share (one at least: a row larger than a share
        // fills a run of its own, as PartitionByBytes's pieces do).
        const uint64_t need = boundary(k) > done ? boundary(k) - done : 0;
        take = std::min(take, std::max<uint64_t>(1, (need + c.bytes - 1) / c.bytes));
      }
      StridedCopy part = c;
      part.gpu += first * c.gpu_pitch;
      part.host += first * c.host_pitch;
      part.rows = take;
      if (take == 1) part.gpu_pitch = part.host_pitch = 0;
      runs[k].push_back(part);
      done += take * c.bytes;
      first += take;
      if (k + 1 < parts && done >= boundary(k)) ++k;
    }
  }
  std::erase_if(runs, [](const std::vector<StridedCopy>& run) { return run.empty(); });
  return runs;
}

std::vector<size_t> PartitionByBytes(absl::Span<const PieceCopy> pieces, size_t max_parts,
                                     uint64_t min_part_bytes) {
  uint64_t total = 0;
  for (const PieceCopy& piece : pieces) total += piece.bytes;
  uint64_t parts = min_part_bytes == 0 ? max_parts : total / min_part_bytes;
  parts = std::clamp<uint64_t>(parts, 1, std::max<size_t>(max_parts, 1));
  std::vector<size_t> bounds = {0};
  uint64_t done = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    done += pieces[i].bytes;
    // Cut after piece i once the run reached its share of the bytes: (k / parts) * total.
    uint64_t next = bounds.size();
    if (next < parts && i + 1 < pieces.size() && done * parts >= next * total) {
      bounds.push_back(i + 1);
    }
  }
  bounds.push_back(pieces.size());
  if (bounds.size() == 2 && pieces.empty()) bounds.pop_back();
  return bounds;
}

CopyStrategy ResolveStrategy(CopyStrategy requested, CopyDirection direction,
                             uint64_t max_piece_bytes, uint64_t kernel_max_piece_bytes) {
  if (requested != CopyStrategy::kAuto) return requested;
  if (direction == CopyDirection::kDown) return CopyStrategy::kBatch;
  return max_piece_bytes < kernel_max_piece_bytes ? CopyStrategy::kStaged : CopyStrategy::kBatch;
}

const char* CopyStrategyName(CopyStrategy strategy) {
  switch (strategy) {
    case CopyStrategy::kAuto:
      return "auto";
    case CopyStrategy::kBatch:
      return "batch";
    case CopyStrategy::kKernel:
      return "kernel";
    case CopyStrategy::kMemcpyLoop:
      return "loop";
    case CopyStrategy::kStaged:
      return "staged";
  }
  return "unknown";
}

std::optional<CopyStrategy> CopyStrategyFromName(std::string_view name) {
  for (CopyStrategy s : {CopyStrategy::kAuto, CopyStrategy::kBatch, CopyStrategy::kKernel,
                         CopyStrategy::kMemcpyLoop, CopyStrategy::kStaged}) {
    if (name == CopyStrategyName(s)) return s;
  }
  return std::nullopt;
}

}  // namespace kvstrata
