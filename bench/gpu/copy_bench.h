// copy_bench internals: one row = one geometry and direction, timed for the ceiling and
// each copy strategy of the CudaTransferEngine.
#ifndef KVSTRATA_BENCH_GPU_COPY_BENCH_H_
#define KVSTRATA_BENCH_GPU_COPY_BENCH_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "daemon/transfer/cuda_transfer_engine.h"

namespace kvstrata::bench {

enum class Direction { kStore, kLoad, kBoth };
inline constexpr std::array<CopyStrategy, 4> kStrategies = {
    CopyStrategy::kMemcpyLoop, CopyStrategy::kBatch, CopyStrategy::kKernel, CopyStrategy::kStaged};

// Position of `strategy` in kStrategies (kAuto resolves before this is asked).
inline size_t StrategyIndex(CopyStrategy strategy) {
  for (size_t i = 0; i < kStrategies.size(); ++i) {
    if (kStrategies[i] == strategy) return i;
  }
  return 1;
}

struct RowSpec {
  std::string layout;  // "per-layer" or "cross-layer"
  uint64_t piece_bytes = 0;
  uint32_t tensors = 0;
  Direction direction = Direction::kStore;
};

struct StrategyFigure {
  double gbps = 0;
  double cpu_ms_per_gb = 0;
  std::string error;
};

struct RowResult {
  RowSpec spec;
  uint64_t bytes = 0;  // Per run (both directions together for kBoth).
  double ceiling_gbps = 0;
  std::array<StrategyFigure, kStrategies.size()> figures;  // In kStrategies order.
  CopyStrategy chosen = CopyStrategy::kBatch;              // What kAuto picks.
  double target_fraction = 0;                              // Of the ceiling.
  bool pass = false;
  std::string verdict;
};

// One engine (and host region, 1 region_bytes) per strategy, alive for the whole run.
struct Engines {
  std::vector<std::unique_ptr<CudaTransferEngine>> engines;  // kStrategies order.
  std::vector<uint8_t*> regions;
  uint64_t region_bytes = 0;
};

std::string DirectionName(Direction d);
// Runs one row: `repeats` timed runs per figure after a warm-up; median.
RowResult RunRow(const RowSpec& spec, Engines& engines, uint64_t bytes, int repeats,
                 uint64_t kernel_max_piece_bytes);

}  // namespace kvstrata::bench

#endif  // KVSTRATA_BENCH_GPU_COPY_BENCH_H_
