// TransferEngine: moves KV blocks between an engine's GPU KV cache (opened from CUDA IPC
// handles) and slots of the daemon's L1 shared-memory region, on the daemon's own
// streams. Built from cuda_transfer_engine.* when KVSTRATA_WITH_CUDA; otherwise Create
// answers UNIMPLEMENTED and the daemon serves host mode only.
//
// Block layout: an engine block is a list of pieces, one per registered tensor (per layer
// and K/V, or one cross-layer piece): piece i of block b lives at
//   tensor_i.base + tensor_i.base_offset + b * tensor_i.block_stride, piece_bytes_i long.
// In an L1 slot the pieces of one block are stored back to back in tensor order, so the
// slot holds sum(piece_bytes) == the namespace's bytes_per_block.
//
// Layer-wise loads: a load with `layer_flag_value` is copied layer by layer (each layer
// split over the copy streams, then joined), writing the value into the registration's
// flag word of that layer, so that the engine's stream, waiting for the word, can start a
// layer's attention once that layer landed (while later layers still copy).
//
// Ordering: a store first waits (polling from the daemon's issue thread) for the IPC event
// the engine recorded after the forward pass, giving up when the session ends; a
// transfer's completion callback runs only after every copy of it finished on the GPU.
// Loads are issued ahead of queued stores (separate, higher-priority streams).
//
// Faults: a failed copy fails exactly the blocks it covered (TransferResult.failed); a
// session's end (or engine crash) waits for its in-flight copies, then closes its IPC
// memory and event handles, so a restarted engine can register again.
//
// Thread safety: thread-safe. Completion callbacks run on engine threads, exactly once
// per accepted Submit, and must not call back into the engine.
#ifndef KVSTRATA_DAEMON_TRANSFER_TRANSFER_ENGINE_H_
#define KVSTRATA_DAEMON_TRANSFER_TRANSFER_ENGINE_H_

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/common/ids.h"
#include "daemon/common/tier.h"

namespace kvstrata {

inline constexpr size_t kCudaIpcHandleBytes = 64;
using IpcHandleBytes = std::array<char, kCudaIpcHandleBytes>;

struct CudaTensorSpec {
  IpcHandleBytes ipc_handle{};
  uint64_t base_offset = 0;       // Offset of block 0 from the allocation's start.
  uint64_t allocation_bytes = 0;  // Size of the exported allocation.
  uint64_t block_stride = 0;      // Bytes between consecutive blocks.
  uint64_t piece_bytes = 0;       // Contiguous bytes of one block in this tensor.
  uint32_t layer = 0;
  uint32_t kv_index = 0;
};

// One 8-byte word per layer (the tensors' distinct `layer` values, ascending) in the
// engine's GPU memory, for layer-wise loads (TransferRequest.layer_flag_value).
struct CudaLayerFlagsSpec {
  IpcHandleBytes ipc_handle{};
  uint64_t offset = 0;  // Of word 0 from the allocation's start.
  uint64_t allocation_bytes = 0;
};

struct CudaMemorySpec {
  std::string gpu_uuid;  // "GPU-xxxxxxxx-..."
  uint32_t num_blocks = 0;
  std::vector<CudaTensorSpec> tensors;
  std::vector<IpcHandleBytes> ipc_events;
  std::optional<CudaLayerFlagsSpec> layer_flags;
};

// One engine block <-> one L1 slot.
struct BlockCopy {
  uint32_t block_id = 0;
  uint64_t host_offset = 0;  // Offset of the slot in the L1 region.
};

struct TransferRequest {
  RegistrationId registration = 0;
  CopyDirection direction = CopyDirection::kDown;  // down: a store (GPU -> L1); up: a load
  std::vector<BlockCopy> blocks;
  std::optional<uint32_t> wait_event;  // Index into CudaMemorySpec.ipc_events (stores).
  // Loads only, on a registration with layer_flags: copy layer by layer and, once layer i's
  // copies landed, write this value into flag word i (a GPU-side write on the copy stream,
  // after a memory barrier). Loads of one registration must be submitted one at a time for
  // the words to only grow.
  std::optional<uint64_t> layer_flag_value;
};

// Where one transfer's time went, on the lane's threads (microseconds; all 0 where not
// measured, e.g. without CUDA). For the daemon's per-job debug log.
struct TransferTimings {
  int64_t queued_us = 0;  // Submit to the issue thread taking it (earlier jobs, free slots).
  int64_t plan_us = 0;    // Planning its copies.
  int64_t issue_us = 0;   // Waiting for the engine's event (stores) and enqueueing the copies.
  int64_t idle_us = 0;    // Issued to the completion thread starting to wait for it (busy
                          // with earlier jobs' completions meanwhile).
  int64_t wait_us = 0;    // Issued to the completion thread seeing the copies done.
  int64_t gpu_us = 0;     // On the GPU (CUDA events): from before the first copy to after
                          // the last; issue_us + wait_us - gpu_us ~ the completion's wake-up.
  // kBatch (not layer-wise): of issue_us, grouping the pieces into 2-D copies and cutting
  // those into runs (the GPU idles meanwhile), and what came of it: 2-D copies and single
  // cudaMemcpyBatchAsync entries.
  int64_t group_us = 0;
  int64_t copies_2d = 0;
  int64_t copy_entries = 0;
};

struct TransferResult {
  std::vector<uint32_t> failed;  // Indices into TransferRequest.blocks that were not copied.
  std::string error;             // Cause, when `failed` is not empty.
  TransferTimings timings;
};

// How a transfer's pieces are copied (docs/gpu-data-path.md, "Copy strategies").
enum class CopyStrategy {
  kAuto,        // Stores: kBatch. Loads: kStaged when the largest piece <
                // kernel_max_piece_bytes, else kBatch.
  kBatch,       // One cudaMemcpyBatchAsync per transfer, piece by piece.
  kKernel,      // One gather/scatter kernel over (src, dst, bytes) descriptors, reading or
                // writing the pinned host region directly over PCIe.
  kMemcpyLoop,  // One cudaMemcpyAsync per piece (vLLM's native path; a baseline).
  kStaged,      // Whole blocks over PCIe by DMA (one copy per L1 slot) through a GPU
                // staging buffer, pieces gathered/scattered there by a kernel at HBM speed.
};

struct TransferEngineOptions {
  void* host_base = nullptr;  // The L1 region (registered with cudaHostRegister once).
  uint64_t host_bytes = 0;
  uint32_t max_blocks_per_transfer = 65536;
  CopyStrategy copy_strategy = CopyStrategy::kAuto;
  // kAuto's threshold for loads where `calibrate` is off or fails; set from
  // bench/gpu/copy_bench (docs/gpu-data-path.md).
  // 256 KiB: copy_bench's recommendation on an H100, and one engine job of 64 KiB pieces
  // reached 86-87 % of the ceiling staged against 77-83 % batched
  // (bench/results/h100-2026-11-23-engine-jobs/NOTES.md).
  uint64_t kernel_max_piece_bytes = 256 * 1024;
  // Streams per direction and GPU; one transfer's copies are spread over them (1..8).
  uint32_t copy_streams = 4;
  // Measure kernel_max_piece_bytes per GPU at start (copy_calibration.h) instead of using
  // the value above; a calibration that fails keeps the value above.
  bool calibrate = false;
};

class TransferEngine {
 public:
  // UNIMPLEMENTED without CUDA support; FAILED_PRECONDITION when no GPU is visible or the
  // host region cannot be registered.
  static absl::StatusOr<std::unique_ptr<TransferEngine>> Create(TransferEngineOptions options);
  virtual ~TransferEngine() = default;

  // Opens the spec's IPC memory and event handles on the GPU named by its uuid (each
  // allocation once per session). INVALID_ARGUMENT when the geometry does not fit
  // (pieces do not add up to `block_bytes`, a block outside its allocation, a handle of the
  // wrong size); NOT_FOUND for an unknown GPU uuid; FAILED_PRECONDITION when CUDA refuses
  // a handle (its message says which).
  virtual absl::StatusOr<RegistrationId> Register(SessionId session, const CudaMemorySpec& spec,
                                                  uint64_t block_bytes) = 0;
  // NOT_FOUND for an unknown registration, FAILED_PRECONDITION for another session's.
  virtual absl::Status Unregister(SessionId session, RegistrationId registration) = 0;
  // Waits for the session's in-flight copies, then releases its registrations.
  virtual void EndSession(SessionId session) = 0;

  // Queues the copies; `done` runs once they finished (or failed). INVALID_ARGUMENT for a
  // block id >= num_blocks, a slot outside the region, an event index out of range;
  // NOT_FOUND / FAILED_PRECONDITION for the registration as above. On error `done` is
  // not called. Returns at once.
  virtual absl::Status Submit(SessionId session, TransferRequest request,
                              std::function<void(TransferResult)> done) = 0;

  // One line per GPU: the load threshold in use and, when calibrated, the measured rows
  // (CopyCalibration::Summary) or why the calibration failed. For the start-up log.
  virtual std::vector<std::string> CopyChoices() const { return {}; }
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_TRANSFER_TRANSFER_ENGINE_H_
