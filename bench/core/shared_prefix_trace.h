// A deterministic shared-prefix request trace for cache simulations: a few long system
// prompts shared by many users, multi-turn conversations that come back, and a fresh
// user suffix on every request. A request is the chain of block ids it looks up, in
// order; block ids are dense (0 .. unique_blocks-1) and, like chained block hashes, an id
// names its whole prefix (the same conversation turn always has the same ids).
//
// Popularity: the system prompt of a new conversation is Zipf(prompt_zipf) over the
// prompts; a returning request picks an active conversation Zipf(conversation_zipf) over
// recency rank (rank 1 = the most recently active). Thread safety: plain value types.
#ifndef KVSTRATA_BENCH_CORE_SHARED_PREFIX_TRACE_H_
#define KVSTRATA_BENCH_CORE_SHARED_PREFIX_TRACE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvstrata::bench {

struct TraceOptions {
  uint64_t seed = 42;
  size_t requests = 12000;
  size_t prompts = 8;
  uint32_t prompt_min_blocks = 200, prompt_max_blocks = 2000;
  double prompt_zipf = 1.0;
  double new_conversation_probability = 0.35;  // else a returning conversation
  double conversation_zipf = 1.0;
  size_t max_active_conversations = 2000;              // the oldest retire beyond this
  uint32_t max_turns = 12;                             // a conversation retires after this
  uint32_t turn_min_blocks = 4, turn_max_blocks = 48;  // new blocks per request
};

struct Trace {
  std::vector<uint32_t> blocks;  // every request's chain, concatenated
  std::vector<size_t> starts;    // request i = blocks[starts[i], starts[i+1])
  size_t unique_blocks = 0;
  size_t prompt_blocks = 0;  // unique blocks of the system prompts

  size_t requests() const { return starts.size() - 1; }
  size_t accesses() const { return blocks.size(); }
};

Trace MakeSharedPrefixTrace(const TraceOptions& options);

}  // namespace kvstrata::bench

#endif  // KVSTRATA_BENCH_CORE_SHARED_PREFIX_TRACE_H_
