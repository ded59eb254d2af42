// hit_ratio: block hit ratio of the L1 eviction policies (LRU, ARC, S3-FIFO) on a
// deterministic shared-prefix trace (bench/core/shared_prefix_trace.h), at capacities of
// 10%, 25% and 50% of the working set (unique blocks), beside two baselines computed in
// the same run: Belady's clairvoyant OPT (with bypass: a block whose next use is further
// than every resident block's is not stored) and the infinite-cache ceiling (every
// access but the first of each block hits).
//
// Replay, as BlockCache does it: each request looks up its chain (only the leading
// present blocks hit, and only those are touched in the policy), then stores the blocks
// that are not present, evicting the policy's victim whenever the cache holds C blocks.
// The policies are the daemon's own EvictionPolicy implementations with capacity C; ids
// are mixed 64-bit fingerprints, as BlockCache uses. (BlockCache also applies watermarks,
// evicting from 95% down to 85% of the pool; this model is the policy at a hard C.)
//
// Usage: hit_ratio [requests=12000] [seed=42]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <queue>
#include <string>
#include <vector>

#include "bench/core/shared_prefix_trace.h"
#include "daemon/eviction/eviction_policy.h"

namespace kvstrata::bench {
namespace {

uint64_t Mix(uint64_t x) {  // splitmix64 finaliser: fingerprint-like policy ids
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

struct Result {
  uint64_t hits = 0;
  uint64_t conversation_hits = 0;  // hits on blocks beyond the system prompts
  double seconds = 0;
};

// Counts the hits of accesses [begin, begin + hits) of one request.
void Count(const Trace& trace, size_t begin, size_t hits, Result* result) {
  result->hits += hits;
  for (size_t i = begin; i < begin + hits; ++i) {
    result->conversation_hits += trace.blocks[i] >= trace.prompt_blocks;
  }
}

Result SimulatePolicy(const Trace& trace, const std::string& name, size_t capacity) {
  auto start = std::chrono::steady_clock::now();
  std::unique_ptr<EvictionPolicy> policy = *MakeEvictionPolicy(name, capacity);
  auto all = [](EvictionPolicy::Id) { return true; };
  Result result;
  for (size_t r = 0; r < trace.requests(); ++r) {
    size_t begin = trace.starts[r], end = trace.starts[r + 1], i = begin;
    for (; i < end && policy->Contains(Mix(trace.blocks[i])); ++i) {
      policy->OnAccess(Mix(trace.blocks[i]));
    }
    Count(trace, begin, i - begin, &result);
    for (; i < end; ++i) {
      uint64_t id = Mix(trace.blocks[i]);
      if (policy->Contains(id)) continue;  // present beyond the prefix: already stored
      if (policy->Size() >= capacity && !policy->PickVictim(all).has_value()) continue;
      policy->OnInsert(id);
    }
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

// Belady's OPT. Priority = (next use, depth in the chain): the furthest next use leaves
// first, and among blocks of the same request the deepest, so residents stay
// prefix-closed and every resident block of a chain's prefix is a prefix hit.
class Belady {
 public:
  Belady(const Trace& trace, size_t capacity)
      : trace_(trace), capacity_(capacity), key_(trace.unique_blocks, kAbsent) {
    BuildNextUse();
  }

  Result Run() {
    auto start = std::chrono::steady_clock::now();
    Result result;
    for (size_t r = 0; r < trace_.requests(); ++r) {
      Count(trace_, trace_.starts[r], Request(r), &result);
    }
    result.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return result;
  }

 private:
  static constexpr uint64_t kAbsent = std::numeric_limits<uint64_t>::max();
  using Entry = std::pair<uint64_t, uint32_t>;  // (priority, block)

  void BuildNextUse() {
    next_.assign(trace_.accesses(), 0);
    std::vector<uint64_t> seen(trace_.unique_blocks, kNever);
    for (size_t i = trace_.accesses(); i-- > 0;) {
      next_[i] = seen[trace_.blocks[i]];
      seen[trace_.blocks[i]] = i;
    }
  }

  uint64_t Priority(size_t access, size_t depth) const {
    return (next_[access] << 20) | std::min<size_t>(depth, (1 << 20) - 1);
  }

  size_t Request(size_t r) {
    size_t begin = trace_.starts[r], end = trace_.starts[r + 1], hits = 0;
    while (begin + hits < end && key_[trace_.blocks[begin + hits]] != kAbsent) ++hits;
    for (size_t i = begin; i < end; ++i) Touch(i, i - begin);
    return hits;
  }

  // Re-keys a resident block with its next use, or stores a missing one.
  void Touch(size_t access, size_t depth) {
    uint32_t block = trace_.blocks[access];
    uint64_t priority = Priority(access, depth);
    if (key_[block] != kAbsent) return Set(block, priority);
    if (next_[access] == kNever) return;  // never used again: bypass
    if (size_ >= capacity_) {
      if (Top().first <= priority) return;  // furthest of all: bypass
      key_[heap_.top().second] = kAbsent;
      heap_.pop();
      --size_;
    }
    ++size_;
    Set(block, priority);
  }

  void Set(uint32_t block, uint64_t priority) {
    key_[block] = priority;
    heap_.push({priority, block});
    if (heap_.size() > 4 * capacity_ + (1 << 20)) Compact();
  }

  // The resident entry of highest priority (drops stale heap entries).
  const Entry& Top() {
    while (key_[heap_.top().second] != heap_.top().first) heap_.pop();
    return heap_.top();
  }

  void Compact() {
    std::vector<Entry> live;
    for (uint32_t b = 0; b < key_.size(); ++b) {
      if (key_[b] != kAbsent) live.push_back({key_[b], b});
    }
    heap_ = std::priority_queue<Entry>(std::less<Entry>(), std::move(live));
  }

  static constexpr uint64_t kNever = (1ull << 43) - 1;
  const Trace& trace_;
  const size_t capacity_;
  std::vector<uint64_t> next_;  // per access: index of the block's next access
  std::vector<uint64_t> key_;   // per block: priority while resident, else kAbsent
  std::priority_queue<Entry> heap_;
  size_t size_ = 0;
};

uint64_t ConversationAccesses(const Trace& t) {
  uint64_t n = 0;
  for (uint32_t b : t.blocks) n += b >= t.prompt_blocks;
  return n;
}

void PrintRow(const char* name, const Result& r, const Trace& t, const Result& opt) {
  double misses = static_cast<double>(t.accesses() - r.hits);
  std::printf("  %-9s  %8.2f%%  %8.2f%%  %8.2f%%  %10.2fx  %6.2f s\n", name,
              100.0 * r.hits / t.accesses(), 100.0 * r.conversation_hits / ConversationAccesses(t),
              100.0 * r.hits / opt.hits, misses / (t.accesses() - opt.hits), r.seconds);
}

void Run(const TraceOptions& options) {
  Trace trace = MakeSharedPrefixTrace(options);
  uint64_t ceiling = trace.accesses() - trace.unique_blocks;
  uint64_t conversation_blocks = trace.unique_blocks - trace.prompt_blocks;
  Result infinite{ceiling, ConversationAccesses(trace) - conversation_blocks, 0};
  std::printf(
      "trace: %zu requests, %zu system prompts (%zu blocks), %zu unique blocks, "
      "%zu block lookups, seed %llu\n",
      trace.requests(), options.prompts, trace.prompt_blocks, trace.unique_blocks, trace.accesses(),
      static_cast<unsigned long long>(options.seed));
  std::printf(
      "infinite-cache ceiling: %.2f%% of block lookups hit (%.2f%% of those beyond "
      "the system prompts, \"conv. hit\")\n\n",
      100.0 * ceiling / trace.accesses(),
      100.0 * infinite.conversation_hits / ConversationAccesses(trace));
  std::printf("  %-9s  %9s  %9s  %9s  %11s  %8s\n", "policy", "hit ratio", "conv. hit", "of OPT",
              "misses/OPT", "sim time");
  for (double fraction : {0.10, 0.25, 0.50}) {
    size_t capacity = static_cast<size_t>(fraction * trace.unique_blocks);
    std::printf("-- capacity %.0f%% of the working set (%zu blocks)\n", 100 * fraction, capacity);
    Result opt = Belady(trace, capacity).Run();
    PrintRow("OPT", opt, trace, opt);
    for (const char* name : {"lru", "arc", "s3fifo"}) {
      PrintRow(name, SimulatePolicy(trace, name, capacity), trace, opt);
    }
    PrintRow("infinite", infinite, trace, opt);
  }
}

}  // namespace
}  // namespace kvstrata::bench

int main(int argc, char** argv) {
  kvstrata::bench::TraceOptions options;
  if (argc > 1) options.requests = std::strtoull(argv[1], nullptr, 10);
  if (argc > 2) options.seed = std::strtoull(argv[2], nullptr, 10);
  kvstrata::bench::Run(options);
  return 0;
}
