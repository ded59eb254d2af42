// CalibrateLoads: the measurement of copy_calibration.h on a GPU.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>

#include "daemon/transfer/copy_calibration.h"
#include "daemon/transfer/cuda_copy.h"
#include "daemon/transfer/cuda_util.h"

namespace kvstrata {
namespace {

constexpr uint64_t kSlotBytes = 2 << 20;
constexpr uint64_t kCalibrationBytes = 64 << 20;  // Two staging buffers' worth.
constexpr int kTimedRuns = 5;

// What the measurement holds; freed in the destructor whatever happened.
struct Buffers {
  ~Buffers() {
    if (start != nullptr) cudaEventDestroy(start);
    if (stop != nullptr) cudaEventDestroy(stop);
    if (stream != nullptr) cudaStreamDestroy(stream);
    if (scatter != nullptr) cudaStreamDestroy(scatter);
    if (host != nullptr) cudaFreeHost(host);
    if (gpu != nullptr) cudaFree(gpu);
  }
  unsigned char* host = nullptr;
  unsigned char* gpu = nullptr;
  cudaStream_t stream = nullptr;
  cudaStream_t scatter = nullptr;  // The staged copies' kernels (joined into `stream`).
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  CopyScratch scratch;
};

// The pieces of kCalibrationBytes: slot b's piece j goes to a shuffled place of `gpu`. Each
// piece is its own tensor, so none merge or group into 2-D copies.
StagedPlan ScatteredPlan(const Buffers& b, uint64_t piece_bytes, std::mt19937_64& rng) {
  const uint64_t per_slot = kSlotBytes / piece_bytes;
  const uint64_t pieces = kCalibrationBytes / piece_bytes;
  std::vector<uint64_t> place(pieces);
  std::iota(place.begin(), place.end(), 0);
  std::shuffle(place.begin(), place.end(), rng);
  StagedPlan plan;
  plan.block_bytes = kSlotBytes;
  for (uint64_t slot = 0; slot < kCalibrationBytes / kSlotBytes; ++slot) {
    plan.slots.push_back(reinterpret_cast<uint64_t>(b.host) + slot * kSlotBytes);
    plan.first_piece.push_back(static_cast<uint32_t>(plan.pieces.size()));
    for (uint64_t j = 0; j < per_slot; ++j) {
      const uint64_t index = slot * per_slot + j;
      plan.pieces.push_back({reinterpret_cast<uint64_t>(b.gpu) + place[index] * piece_bytes,
                             j * piece_bytes, piece_bytes, static_cast<uint32_t>(index)});
    }
  }
  plan.first_piece.push_back(static_cast<uint32_t>(plan.pieces.size()));
  return plan;
}

// Milliseconds of one `issue` on b's stream, from before the issue to its last copy.
template <typename Issue>
absl::StatusOr<float> TimeOnce(Buffers& b, Issue issue) {
  cudaError_t error = cudaEventRecord(b.start, b.stream);
  if (error != cudaSuccess) return CudaError(error, "cudaEventRecord");
  CopyError copied = issue();
  if (!copied.ok()) {
    cudaStreamSynchronize(b.stream);
    cudaStreamSynchronize(b.scatter);
    return CudaError(copied.error, copied.call);
  }
  error = cudaEventRecord(b.stop, b.stream);
  if (error == cudaSuccess) error = cudaEventSynchronize(b.stop);
  float ms = 0;
  if (error == cudaSuccess) error = cudaEventElapsedTime(&ms, b.start, b.stop);
  if (error != cudaSuccess) return CudaError(error, "timing a calibration copy");
  return ms;
}

// GB/s of the best of kTimedRuns (after one warm-up) of each of `a` and `b`, taken in turn
// so that a passing disturbance (another process's copies) slows both, not one.
template <typename A, typename B>
absl::Status TimePair(Buffers& buffers, A a, B b, double* a_gbps, double* b_gbps) {
  float best[2] = {0, 0};
  for (int run = -1; run < kTimedRuns; ++run) {
    for (int which = 0; which < 2; ++which) {
      absl::StatusOr<float> ms = which == 0 ? TimeOnce(buffers, a) : TimeOnce(buffers, b);
      if (!ms.ok()) return ms.status();
      if (run >= 0 && *ms > 0 && (best[which] == 0 || *ms < best[which])) best[which] = *ms;
    }
  }
  auto gbps = [](float ms) { return ms > 0 ? kCalibrationBytes / (ms * 1e-3) / 1e9 : 0.0; };
  *a_gbps = gbps(best[0]);
  *b_gbps = gbps(best[1]);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CopyCalibration> CalibrateLoads(int device, int grid_blocks) {
  cudaError_t error = cudaSetDevice(device);
  if (error != cudaSuccess) return CudaError(error, "cudaSetDevice");
  Buffers b;
  error = cudaMallocHost(reinterpret_cast<void**>(&b.host), kCalibrationBytes);
  if (error != cudaSuccess) return CudaError(error, "cudaMallocHost(calibration)");
  error = cudaMalloc(reinterpret_cast<void**>(&b.gpu), kCalibrationBytes);
  if (error != cudaSuccess) return CudaError(error, "cudaMalloc(calibration)");
  error = cudaStreamCreateWithFlags(&b.stream, cudaStreamNonBlocking);
  if (error == cudaSuccess) error = cudaStreamCreateWithFlags(&b.scatter, cudaStreamNonBlocking);
  if (error == cudaSuccess) error = cudaEventCreate(&b.start);
  if (error == cudaSuccess) error = cudaEventCreate(&b.stop);
  if (error != cudaSuccess) return CudaError(error, "calibration stream and events");
  std::memset(b.host, 0x5A, kCalibrationBytes);

  CopyCalibration result;
  result.device = device;
  std::mt19937_64 rng(device);
  const CopyLaunch dma{CopyStrategy::kBatch, CopyDirection::kUp, grid_blocks};
  const CopyLaunch staged{CopyStrategy::kStaged, CopyDirection::kUp, grid_blocks};
  for (uint64_t piece_bytes : CalibrationPieceSizes()) {
    const StagedPlan plan = ScatteredPlan(b, piece_bytes, rng);
    std::vector<PieceCopy> pieces = plan.pieces;  // Host side absolute for DMA.
    for (size_t slot = 0; slot + 1 < plan.first_piece.size(); ++slot) {
      for (uint32_t i = plan.first_piece[slot]; i < plan.first_piece[slot + 1]; ++i) {
        pieces[i].host += plan.slots[slot];
      }
    }
    CalibrationRow row;
    row.piece_bytes = piece_bytes;
    absl::Status timed = TimePair(
        b, [&] { return IssueCopies(dma, pieces, &b.scratch, b.stream); },
        [&] { return IssueStagedCopies(staged, plan, &b.scratch, b.stream, b.scatter); },
        &row.dma_gbps, &row.staged_gbps);
    if (!timed.ok()) return timed;
    result.rows.push_back(row);
  }
  result.staged_max_piece_bytes = ChooseStagedMaxPieceBytes(result.rows);
  return result;
}

}  // namespace kvstrata
