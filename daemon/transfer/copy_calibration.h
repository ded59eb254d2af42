// A short measurement at start, per GPU, of which host->device loads go faster staged than
// by DMA: sets kAuto's piece-size threshold (TransferEngineOptions::kernel_max_piece_bytes)
// from this machine instead of one constant. CUDA build only.
//
// For each candidate piece size it copies the same 64 MiB of scattered pieces (2 MiB slots
// of pinned host memory into shuffled places of a GPU buffer, so that nothing merges or
// groups into 2-D copies) by DMA (kBatch, one entry per piece) and staged, in turn, on one
// stream, best of five of each after a warm-up, timed with CUDA events from before the
// issue to after the last copy (the issuing thread's cost counts, as it does for a job).
// Blocking: ~0.6 s on an H100 (transfer_gpu_test's calibration test, allocations included).
// Allocates 64 MiB pinned and 128 MiB on the device, freed before it returns. The choice
// itself (ChooseStagedMaxPieceBytes) is plain C++ and builds everywhere
// (copy_calibration.cc); the measurement only with CUDA (copy_calibration_cuda.cc).
#ifndef KVSTRATA_DAEMON_TRANSFER_COPY_CALIBRATION_H_
#define KVSTRATA_DAEMON_TRANSFER_COPY_CALIBRATION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kvstrata {

struct CalibrationRow {
  uint64_t piece_bytes = 0;
  double dma_gbps = 0;
  double staged_gbps = 0;
};

// DMA is taken where it is within this factor of staged copies: staged copies run a kernel
// on the GPU's SMs, beside the engine's forward pass
// (bench/results/h100-2026-11-24-vllm026-run14/NOTES.md, vLLM run 14).
inline constexpr double kDmaPreference = 0.97;

struct CopyCalibration {
  int device = 0;
  std::vector<CalibrationRow> rows;  // Ascending piece sizes.
  // The smallest candidate from which DMA was at least kDmaPreference as fast as staged
  // copies for it and every larger candidate; twice the largest candidate when staged won
  // throughout.
  uint64_t staged_max_piece_bytes = 0;
  std::string Summary() const;  // One line for the log.
  double FastestGbps() const;   // The best row, DMA or staged (0 without rows).
};

// The candidates: 16, 32, 64, 128, 256 and 512 KiB.
const std::vector<uint64_t>& CalibrationPieceSizes();

// The threshold the rows give (see CopyCalibration::staged_max_piece_bytes).
uint64_t ChooseStagedMaxPieceBytes(const std::vector<CalibrationRow>& rows);

// Measures on `device` (made current on this thread). FAILED_PRECONDITION naming the CUDA
// call that failed; nothing is left allocated.
absl::StatusOr<CopyCalibration> CalibrateLoads(int device, int grid_blocks);

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_TRANSFER_COPY_CALIBRATION_H_
