#include "daemon/jobs/completion_queue.h"

#include <algorithm>

namespace kvstrata {

void CompletionQueue::Push(SessionId session, JobCompletion completion) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pending_.find(session);
    if (it == pending_.end()) return;  // The session ended: nobody will read it.
    it->second.push_back(std::move(completion));
  }
  changed_.notify_all();
}

size_t CompletionQueue::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t total = 0;
  for (const auto& [session, queue] : pending_) total += queue.size();
  return total;
}

std::vector<JobCompletion> CompletionQueue::Poll(SessionId session, size_t max) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<JobCompletion> out;
  auto it = pending_.find(session);
  if (it == pending_.end()) return out;
  size_t n = max == 0 ? it->second.size() : std::min(max, it->second.size());
  for (size_t i = 0; i < n; ++i) {
    out.push_back(std::move(it->second.front()));
    it->second.pop_front();
  }
  return out;
}

bool CompletionQueue::Wait(SessionId session, absl::Duration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  auto ready = [&] {
    auto it = pending_.find(session);
    return shut_down_ || it == pending_.end() || !it->second.empty();
  };
  changed_.wait_for(lock, absl::ToChronoNanoseconds(timeout), ready);
  return !shut_down_ && pending_.contains(session);
}

void CompletionQueue::OpenSession(SessionId session) {
  std::lock_guard<std::mutex> lock(mu_);
  pending_.try_emplace(session);
}

void CompletionQueue::EndSession(SessionId session) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.erase(session);
  }
  changed_.notify_all();
}

void CompletionQueue::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    shut_down_ = true;
  }
  changed_.notify_all();
}

}  // namespace kvstrata
