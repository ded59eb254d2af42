// copy_plan: the lane's CPU cost of turning one DMA store of 512 blocks (an 8K-token request)
// into copies before the first one is issued (the GPU idles meanwhile): PlanCopies (a piece
// per tensor and block), GroupStrided (2-D copies) and PartitionStrided (runs for four
// streams). Baseline: PlanCopies alone, in the same run. Two layouts: MLA (32 tensors of 18
// KiB pieces) and vLLM NHD 16-token blocks (64 tensors of 32 KiB pieces), blocks 0..511 in L1
// slots as the slab allocator hands them out after earlier jobs: consecutive, cut at 64 MiB
// slab ends, the first slab part-used.
#include <vector>

#include "benchmark/benchmark.h"
#include "daemon/transfer/transfer_validation.h"

namespace kvstrata {
namespace {

constexpr uint64_t kSlab = 64ULL << 20;
constexpr size_t kBlocks = 512;

struct Job {
  std::vector<TensorLayout> tensors;
  std::vector<BlockCopy> blocks;
};

// `tensors` tensors of `piece` bytes per block (4096 blocks each, allocations 1 GiB apart).
Job MakeJob(uint32_t tensors, uint64_t piece) {
  Job job;
  for (uint32_t t = 0; t < tensors; ++t) {
    job.tensors.push_back({(uint64_t{t} + 1) << 30, piece, piece, t / 2});
  }
  const uint64_t slot = piece * tensors;
  const uint64_t per_slab = kSlab / slot;
  uint64_t next = per_slab / 2;  // The first slab is half used by earlier blocks.
  for (uint32_t b = 0; b < kBlocks; ++b, ++next) {
    job.blocks.push_back({b, (next / per_slab) * kSlab + (next % per_slab) * slot});
  }
  return job;
}

const Job& Layout(int64_t which) {
  static const Job* mla = new Job(MakeJob(32, 18 << 10));
  static const Job* nhd16 = new Job(MakeJob(64, 32 << 10));
  return which == 0 ? *mla : *nhd16;
}

void Label(benchmark::State& state) { state.SetLabel(state.range(0) == 0 ? "mla" : "nhd16"); }

void BM_PlanCopies(benchmark::State& state) {  // The baseline.
  const Job& job = Layout(state.range(0));
  for (auto _ : state) {
    benchmark::DoNotOptimize(PlanCopies(job.tensors, job.blocks, 0));
  }
  Label(state);
}
BENCHMARK(BM_PlanCopies)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

void BM_PlanGroupPartition(benchmark::State& state) {
  const Job& job = Layout(state.range(0));
  size_t copies = 0;
  for (auto _ : state) {
    auto runs = PartitionStrided(GroupStrided(PlanCopies(job.tensors, job.blocks, 0)), 4, 8 << 20);
    copies = 0;
    for (const auto& run : runs) copies += run.size();
    benchmark::DoNotOptimize(runs);
  }
  state.counters["copies"] = static_cast<double>(copies);
  Label(state);
}
BENCHMARK(BM_PlanGroupPartition)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace kvstrata

BENCHMARK_MAIN();
