// One copy_bench row: the ceiling (one large cudaMemcpyAsync of the same bytes to/from the
// same pinned region) and the engine with each copy strategy, all in this run.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"
#include "bench/gpu/copy_bench.h"
#include "daemon/transfer/transfer_validation.h"

namespace kvstrata::bench {
namespace {

constexpr uint64_t kSession = 1;
constexpr uint64_t kTransferBytes = 64ull << 20;  // Per Submit: ~a few requests' worth.

using Clock = std::chrono::steady_clock;

double CpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto secs = [](const timeval& t) { return t.tv_sec + t.tv_usec / 1e6; };
  return secs(usage.ru_utime) + secs(usage.ru_stime);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct GpuKv {
  void* base = nullptr;
  CudaMemorySpec spec;
  std::vector<void*> allocations;
  uint64_t block_bytes = 0;
  ~GpuKv() {
    if (base != nullptr) cudaFree(base);
  }
};

// `tensors` tensors of packed pieces; as many blocks as fit `bytes`.
bool AllocateKv(const RowSpec& row, uint64_t bytes, GpuKv* kv) {
  kv->block_bytes = row.piece_bytes * row.tensors;
  kv->spec.num_blocks = static_cast<uint32_t>(bytes / kv->block_bytes);
  uint64_t tensor_bytes = kv->spec.num_blocks * row.piece_bytes;
  if (cudaMalloc(&kv->base, tensor_bytes * row.tensors) != cudaSuccess) return false;
  cudaMemset(kv->base, 0x5A, tensor_bytes * row.tensors);
  for (uint32_t i = 0; i < row.tensors; ++i) {
    kv->allocations.push_back(static_cast<uint8_t*>(kv->base) + i * tensor_bytes);
    CudaTensorSpec t;
    t.allocation_bytes = tensor_bytes;
    t.block_stride = row.piece_bytes;
    t.piece_bytes = row.piece_bytes;
    t.layer = i / 2;
    t.kv_index = i % 2;
    kv->spec.tensors.push_back(t);
  }
  return true;
}

// Shuffled block ids into consecutive slots, cut into transfers.
std::vector<std::vector<BlockCopy>> PlanTransfers(const GpuKv& kv) {
  std::vector<uint32_t> ids(kv.spec.num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(1));
  uint64_t per_transfer = std::max<uint64_t>(1, kTransferBytes / kv.block_bytes);
  std::vector<std::vector<BlockCopy>> transfers;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i % per_transfer == 0) transfers.emplace_back();
    transfers.back().push_back({ids[i], i * kv.block_bytes});
  }
  return transfers;
}

class Waiter {
 public:
  std::function<void(TransferResult)> Callback() {
    std::lock_guard<std::mutex> lock(mu_);
    ++pending_;
    return [this](TransferResult r) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!r.failed.empty() && error_.empty()) error_ = r.error;
      if (--pending_ == 0) cv_.notify_all();
    };
  }
  std::string Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return pending_ == 0; });
    return error_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int pending_ = 0;
  std::string error_;
};

// Seconds for one pass of every transfer in the row's direction(s); <0 on failure.
double EngineRun(CudaTransferEngine& engine, uint64_t reg, Direction direction,
                 const std::vector<std::vector<BlockCopy>>& transfers, std::string* error) {
  Waiter waiter;
  auto submit = [&](CopyDirection d, const std::vector<BlockCopy>& blocks) {
    absl::Status s = engine.Submit(kSession, {reg, d, blocks, std::nullopt}, waiter.Callback());
    if (!s.ok()) *error = std::string(s.message());
  };
  Clock::time_point start = Clock::now();
  for (const std::vector<BlockCopy>& blocks : transfers) {
    if (direction != Direction::kLoad) submit(CopyDirection::kDown, blocks);
    if (direction != Direction::kStore) submit(CopyDirection::kUp, blocks);
  }
  std::string failed = waiter.Wait();
  double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (!failed.empty()) *error = failed;
  return error->empty() ? seconds : -1;
}

double CeilingRun(Direction direction, void* gpu, void* host, uint64_t bytes,
                  cudaStream_t streams[2]) {
  Clock::time_point start = Clock::now();
  if (direction != Direction::kLoad) {
    cudaMemcpyAsync(host, gpu, bytes, cudaMemcpyDeviceToHost, streams[0]);
  }
  if (direction != Direction::kStore) {
    cudaMemcpyAsync(gpu, host, bytes, cudaMemcpyHostToDevice, streams[1]);
  }
  cudaStreamSynchronize(streams[0]);
  cudaStreamSynchronize(streams[1]);
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double Ceiling(Direction direction, const GpuKv& kv, uint8_t* host, uint64_t bytes, int repeats) {
  cudaStream_t streams[2];
  for (cudaStream_t& s : streams) cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  CeilingRun(direction, kv.base, host, bytes, streams);  // Warm-up.
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i)
    times.push_back(CeilingRun(direction, kv.base, host, bytes, streams));
  for (cudaStream_t s : streams) cudaStreamDestroy(s);
  uint64_t moved = direction == Direction::kBoth ? 2 * bytes : bytes;
  return moved / Median(times) / 1e9;
}

StrategyFigure MeasureStrategy(CudaTransferEngine& engine, const GpuKv& kv, Direction direction,
                               int repeats) {
  StrategyFigure figure;
  auto reg = engine.RegisterLocalForTesting(kSession, 0, kv.spec, kv.allocations, kv.block_bytes);
  if (!reg.ok()) return {0, 0, std::string(reg.status().message())};
  std::vector<std::vector<BlockCopy>> transfers = PlanTransfers(kv);
  EngineRun(engine, *reg, direction, transfers, &figure.error);  // Warm-up.
  std::vector<double> times;
  double cpu_start = CpuSeconds();
  for (int i = 0; i < repeats && figure.error.empty(); ++i) {
    times.push_back(EngineRun(engine, *reg, direction, transfers, &figure.error));
  }
  double cpu = CpuSeconds() - cpu_start;
  engine.EndSession(kSession);
  if (!figure.error.empty()) return figure;
  uint64_t moved =
      uint64_t{kv.spec.num_blocks} * kv.block_bytes * (direction == Direction::kBoth ? 2 : 1);
  figure.gbps = moved / Median(times) / 1e9;
  figure.cpu_ms_per_gb = cpu * 1e3 / (moved * repeats / 1e9);
  return figure;
}

void Judge(RowResult& r, uint64_t kernel_max_piece_bytes) {
  // Rows that load (or load and store at once) judge what auto picks for loads.
  const CopyDirection d =
      r.spec.direction == Direction::kStore ? CopyDirection::kDown : CopyDirection::kUp;
  r.chosen = ResolveStrategy(CopyStrategy::kAuto, d, r.spec.piece_bytes, kernel_max_piece_bytes);
  size_t chosen = StrategyIndex(r.chosen);
  const StrategyFigure& best = r.figures[chosen];
  const StrategyFigure& loop = r.figures[0];
  bool small = r.spec.layout == "per-layer" && r.spec.piece_bytes <= 64 * 1024;
  r.target_fraction =
      (r.spec.layout == "per-layer" && r.spec.piece_bytes < 64 * 1024) ? 0.80 : 0.90;
  bool ceiling_ok = best.gbps >= r.target_fraction * r.ceiling_gbps;
  bool loop_ok = !small || (loop.gbps > 0 && best.gbps >= 2 * loop.gbps);
  r.pass = best.error.empty() && ceiling_ok && loop_ok;
  r.verdict = r.pass ? "PASS"
                     : absl::StrCat("FAIL", ceiling_ok ? "" : " <ceiling",
                                    loop_ok ? "" : " <2x-loop", best.error.empty() ? "" : " error");
}

}  // namespace

std::string DirectionName(Direction d) {
  switch (d) {
    case Direction::kStore:
      return "gpu->host";
    case Direction::kLoad:
      return "host->gpu";
    case Direction::kBoth:
      return "both";
  }
  return "?";
}

RowResult RunRow(const RowSpec& spec, Engines& engines, uint64_t bytes, int repeats,
                 uint64_t kernel_max_piece_bytes) {
  RowResult r;
  r.spec = spec;
  GpuKv kv;
  if (!AllocateKv(spec, bytes, &kv)) {
    for (StrategyFigure& f : r.figures) f.error = "cudaMalloc failed";
    Judge(r, kernel_max_piece_bytes);
    return r;
  }
  uint64_t per_direction = uint64_t{kv.spec.num_blocks} * kv.block_bytes;
  r.bytes = per_direction * (spec.direction == Direction::kBoth ? 2 : 1);
  r.ceiling_gbps = Ceiling(spec.direction, kv, engines.regions[1], per_direction, repeats);
  for (size_t i = 0; i < kStrategies.size(); ++i) {
    r.figures[i] = MeasureStrategy(*engines.engines[i], kv, spec.direction, repeats);
  }
  Judge(r, kernel_max_piece_bytes);
  return r;
}

}  // namespace kvstrata::bench
