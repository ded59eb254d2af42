#include "bench/core/shared_prefix_trace.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <random>

namespace kvstrata::bench {
namespace {

// Zipf(s) over ranks 0..n-1 by inverse CDF.
class Zipf {
 public:
  Zipf(size_t n, double s) : cdf_(n) {
    double sum = 0;
    for (size_t i = 0; i < n; ++i) cdf_[i] = sum += 1.0 / std::pow(static_cast<double>(i + 1), s);
    for (double& c : cdf_) c /= sum;
  }
  // A rank below `limit` (<= n), by rejection of larger ranks.
  size_t Sample(std::mt19937_64& rng, size_t limit) const {
    std::uniform_real_distribution<double> u(0.0, 1.0);
    while (true) {
      size_t r = std::lower_bound(cdf_.begin(), cdf_.end(), u(rng)) - cdf_.begin();
      if (r < limit) return r;
    }
  }

 private:
  std::vector<double> cdf_;
};

struct Conversation {
  uint32_t prompt = 0;
  uint32_t turns = 0;
  std::vector<uint32_t> history;  // block ids after the system prompt
};

class Generator {
 public:
  explicit Generator(const TraceOptions& o)
      : o_(o),
        rng_(o.seed),
        prompt_zipf_(o.prompts, o.prompt_zipf),
        conversation_zipf_(o.max_active_conversations, o.conversation_zipf) {}

  Trace Run() {
    MakePrompts();
    trace_.starts.push_back(0);
    for (size_t i = 0; i < o_.requests; ++i) Request();
    trace_.unique_blocks = next_id_;
    return std::move(trace_);
  }

 private:
  void MakePrompts() {
    std::uniform_int_distribution<uint32_t> length(o_.prompt_min_blocks, o_.prompt_max_blocks);
    prompts_.resize(o_.prompts);
    for (std::vector<uint32_t>& p : prompts_) {
      p.resize(length(rng_));
      for (uint32_t& id : p) id = next_id_++;
    }
    trace_.prompt_blocks = next_id_;
  }

  // Picks (or starts) the conversation of the next request; it becomes the most recent.
  Conversation& Pick() {
    std::bernoulli_distribution fresh(o_.new_conversation_probability);
    if (active_.empty() || fresh(rng_)) {
      Conversation c;
      c.prompt = static_cast<uint32_t>(prompt_zipf_.Sample(rng_, o_.prompts));
      active_.push_back(std::move(c));
      if (active_.size() > o_.max_active_conversations) active_.pop_front();
      return active_.back();
    }
    size_t rank = conversation_zipf_.Sample(rng_, active_.size());
    auto it = active_.end() - 1 - static_cast<std::ptrdiff_t>(rank);
    Conversation c = std::move(*it);
    active_.erase(it);
    active_.push_back(std::move(c));
    return active_.back();
  }

  void Request() {
    Conversation& c = Pick();
    std::uniform_int_distribution<uint32_t> turn(o_.turn_min_blocks, o_.turn_max_blocks);
    for (uint32_t n = turn(rng_); n > 0; --n) c.history.push_back(next_id_++);
    const std::vector<uint32_t>& prompt = prompts_[c.prompt];
    trace_.blocks.insert(trace_.blocks.end(), prompt.begin(), prompt.end());
    trace_.blocks.insert(trace_.blocks.end(), c.history.begin(), c.history.end());
    trace_.starts.push_back(trace_.blocks.size());
    if (++c.turns >= o_.max_turns) active_.pop_back();
  }

  const TraceOptions o_;
  std::mt19937_64 rng_;
  Zipf prompt_zipf_, conversation_zipf_;
  std::vector<std::vector<uint32_t>> prompts_;
  std::deque<Conversation> active_;  // back = most recently active
  uint32_t next_id_ = 0;
  Trace trace_;
};

}  // namespace

Trace MakeSharedPrefixTrace(const TraceOptions& options) { return Generator(options).Run(); }

}  // namespace kvstrata::bench
