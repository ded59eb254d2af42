// copy_bench: GB/s of the CUDA transfer engine's copy strategies against the PCIe ceiling
// and vLLM's per-block cudaMemcpyAsync loop, per piece size and direction; CPU time per GB;
// PASS/FAIL against the data-path targets; a recommended kAuto threshold.
//   copy_bench [--out results.json] [--repeats N] [--mib-per-row M] [--kernel-max-piece KiB]
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "bench/gpu/copy_bench.h"
#include "daemon/transfer/transfer_validation.h"

namespace kvstrata::bench {
namespace {

struct Flags {
  std::string out;
  int repeats = 5;
  uint64_t bytes = 1024ull << 20;
  uint64_t kernel_max_piece_bytes = TransferEngineOptions{}.kernel_max_piece_bytes;
};

Flags ParseFlags(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string name = argv[i];
    const char* value = argv[i + 1];
    if (name == "--out")
      flags.out = value;
    else if (name == "--repeats")
      flags.repeats = std::max(1, std::atoi(value));
    else if (name == "--mib-per-row")
      flags.bytes = std::strtoull(value, nullptr, 10) << 20;
    else if (name == "--kernel-max-piece")
      flags.kernel_max_piece_bytes = std::strtoull(value, nullptr, 10) << 10;
    else
      std::fprintf(stderr, "unknown flag %s\n", name.c_str());
  }
  return flags;
}

std::vector<RowSpec> Rows() {
  std::vector<RowSpec> rows;
  for (Direction d : {Direction::kStore, Direction::kLoad, Direction::kBoth}) {
    for (uint64_t kib : {16, 64, 256, 2048}) rows.push_back({"per-layer", kib << 10, 64, d});
    rows.push_back({"cross-layer", 2048 << 10, 1, d});
  }
  return rows;
}

bool MakeEngines(const Flags& flags, Engines* engines) {
  engines->region_bytes = flags.bytes;
  for (CopyStrategy strategy : kStrategies) {
    auto* region = static_cast<uint8_t*>(std::aligned_alloc(4096, flags.bytes));
    if (region == nullptr) return false;
    std::memset(region, 0, flags.bytes);
    engines->regions.push_back(region);
    TransferEngineOptions options;
    options.host_base = region;
    options.host_bytes = flags.bytes;
    options.copy_strategy = strategy;
    auto engine = CudaTransferEngine::CreateCuda(options);
    if (!engine.ok()) {
      std::fprintf(stderr, "engine: %s\n", std::string(engine.status().message()).c_str());
      return false;
    }
    engines->engines.push_back(std::move(*engine));
  }
  return true;
}

void PrintHeader() {
  std::printf("%-11s %6s %-9s %8s | %8s %8s %8s %8s | %6s %6s %6s | %-6s %5s %5s | %s\n", "layout",
              "piece", "direction", "ceiling", "loop", "batch", "kernel", "staged", "%ceil",
              "x loop", "cpu/GB", "chosen", "need", "", "verdict");
  std::printf("%-11s %6s %-9s %8s | %8s %8s %8s %8s | %6s %6s %6s | %-6s %5s %5s |\n", "", "KiB",
              "", "GB/s", "GB/s", "GB/s", "GB/s", "GB/s", "chosen", "chosen", "ms", "", "%ceil",
              "");
}

void PrintRow(const RowResult& r) {
  const StrategyFigure& chosen = r.figures[StrategyIndex(r.chosen)];
  double loop = r.figures[0].gbps;
  std::printf(
      "%-11s %6llu %-9s %8.2f | %8.2f %8.2f %8.2f %8.2f | %5.1f%% %6.2f %6.2f | %-6s %4.0f%% %5s | "
      "%s\n",
      r.spec.layout.c_str(), static_cast<unsigned long long>(r.spec.piece_bytes >> 10),
      DirectionName(r.spec.direction).c_str(), r.ceiling_gbps, loop, r.figures[1].gbps,
      r.figures[2].gbps, r.figures[3].gbps, 100 * chosen.gbps / r.ceiling_gbps,
      loop > 0 ? chosen.gbps / loop : 0, chosen.cpu_ms_per_gb, CopyStrategyName(r.chosen),
      100 * r.target_fraction, "", r.verdict.c_str());
  for (size_t i = 0; i < kStrategies.size(); ++i) {
    if (!r.figures[i].error.empty()) {
      std::printf("    %s error: %s\n", CopyStrategyName(kStrategies[i]),
                  r.figures[i].error.c_str());
    }
  }
}

// The smallest per-layer piece size at which batch is at least as fast as staged copies in
// every direction; the kAuto threshold should be that size.
uint64_t RecommendThreshold(const std::vector<RowResult>& rows) {
  uint64_t threshold = 0;
  for (uint64_t kib : {2048, 256, 64, 16}) {
    bool batch_wins = true;
    for (const RowResult& r : rows) {
      if (r.spec.layout != "per-layer" || r.spec.piece_bytes != (kib << 10)) continue;
      batch_wins = batch_wins && r.figures[1].gbps >= 0.98 * r.figures[3].gbps;  // 2%: noise.
    }
    if (!batch_wins) break;
    threshold = kib << 10;
  }
  return threshold == 0 ? (4096ull << 10) : threshold;
}

std::string Json(const std::vector<RowResult>& rows, const Flags& flags, const std::string& device,
                 uint64_t recommended) {
  std::string json = absl::StrCat(
      "{\n  \"device\": \"", device, "\",\n  \"bytes_per_row\": ", flags.bytes,
      ",\n  \"repeats\": ", flags.repeats,
      ",\n  \"kernel_max_piece_bytes\": ", flags.kernel_max_piece_bytes,
      ",\n  \"recommended_kernel_max_piece_bytes\": ", recommended, ",\n  \"rows\": [\n");
  for (size_t i = 0; i < rows.size(); ++i) {
    const RowResult& r = rows[i];
    absl::StrAppend(&json, "    {\"layout\": \"", r.spec.layout,
                    "\", \"piece_bytes\": ", r.spec.piece_bytes, ", \"direction\": \"",
                    DirectionName(r.spec.direction), "\", \"bytes\": ", r.bytes,
                    ", \"ceiling_gbps\": ", r.ceiling_gbps);
    for (size_t s = 0; s < kStrategies.size(); ++s) {
      const StrategyFigure& f = r.figures[s];
      absl::StrAppend(&json, ", \"", CopyStrategyName(kStrategies[s]), "\": {\"gbps\": ", f.gbps,
                      ", \"cpu_ms_per_gb\": ", f.cpu_ms_per_gb, ", \"error\": \"", f.error, "\"}");
    }
    absl::StrAppend(&json, ", \"chosen\": \"", CopyStrategyName(r.chosen),
                    "\", \"target_fraction\": ", r.target_fraction,
                    ", \"pass\": ", r.pass ? "true" : "false", ", \"verdict\": \"", r.verdict,
                    "\"}", i + 1 < rows.size() ? ",\n" : "\n");
  }
  absl::StrAppend(&json, "  ]\n}\n");
  return json;
}

}  // namespace
}  // namespace kvstrata::bench

int main(int argc, char** argv) {
  using namespace kvstrata::bench;
  Flags flags = ParseFlags(argc, argv);
  cudaDeviceProp prop{};
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("no CUDA device: copy_bench needs a GPU\n");
    return 2;
  }
  cudaGetDeviceProperties(&prop, 0);
  std::printf("copy_bench on %s: %llu MiB per row, median of %d, kernel for pieces < %llu KiB\n",
              prop.name, static_cast<unsigned long long>(flags.bytes >> 20), flags.repeats,
              static_cast<unsigned long long>(flags.kernel_max_piece_bytes >> 10));
  Engines engines;
  if (!MakeEngines(flags, &engines)) return 2;
  PrintHeader();
  std::vector<RowResult> rows;
  int passed = 0;
  for (const RowSpec& spec : Rows()) {
    rows.push_back(RunRow(spec, engines, flags.bytes, flags.repeats, flags.kernel_max_piece_bytes));
    PrintRow(rows.back());
    std::fflush(stdout);
    passed += rows.back().pass ? 1 : 0;
  }
  uint64_t recommended = RecommendThreshold(rows);
  std::printf("targets: %d/%zu rows PASS; recommended kernel_max_piece_bytes: %llu KiB\n", passed,
              rows.size(), static_cast<unsigned long long>(recommended >> 10));
  if (!flags.out.empty()) {
    std::ofstream(flags.out) << Json(rows, flags, prop.name, recommended);
    std::printf("results: %s\n", flags.out.c_str());
  }
  engines.engines.clear();
  for (uint8_t* region : engines.regions) std::free(region);
  return 0;
}
