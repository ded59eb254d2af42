#include "daemon/tiers/io_pool.h"

#include <utility>

namespace kvstrata {

IoPool::IoPool(size_t threads) {
  if (threads == 0) threads = 1;
  threads_.reserve(threads);
  for (size_t i = 0; i < threads; ++i) threads_.emplace_back([this] { Run(); });
}

IoPool::~IoPool() { Stop(); }

void IoPool::Stop() {
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    for (auto& queue : queues_) queue.clear();
    threads.swap(threads_);  // A second Stop() joins nothing.
  }
  wake_.notify_all();
  for (std::thread& t : threads) {
    if (t.get_id() == std::this_thread::get_id()) {
      t.detach();  // Stop() from one of the pool's own tasks: it ends when the task returns.
    } else {
      t.join();
    }
  }
}

void IoPool::Submit(Priority priority, std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    queues_[static_cast<size_t>(priority)].push_back(std::move(task));
  }
  wake_.notify_one();
}

size_t IoPool::Queued(Priority priority) const {
  std::lock_guard<std::mutex> lock(mu_);
  return queues_[static_cast<size_t>(priority)].size();
}

void IoPool::Run() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      auto next = [this] {
        for (auto& queue : queues_) {
          if (!queue.empty()) return &queue;
        }
        return static_cast<std::deque<std::function<void()>>*>(nullptr);
      };
      wake_.wait(lock, [&] { return stopping_ || next() != nullptr; });
      if (stopping_) return;
      std::deque<std::function<void()>>* queue = next();
      task = std::move(queue->front());
      queue->pop_front();
    }
    task();
  }
}

}  // namespace kvstrata
