// IoPool: queued tasks run urgent first, then normal, then background, each queue in order;
// Stop drops what is still queued and later Submits.
#include "daemon/tiers/io_pool.h"

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace kvstrata {
namespace {

using Priority = IoPool::Priority;

TEST(IoPoolTest, QueuedTasksRunByPriorityThenInOrder) {
  IoPool pool(1);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::promise<void> started;
  pool.Submit(Priority::kBackground, [&] {
    started.set_value();
    released.wait();
  });
  started.get_future().wait();  // The one thread is busy: the rest queue up.
  std::mutex mu;
  std::vector<std::string> order;
  auto task = [&](std::string name) {
    return [&, name] {
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(name);
    };
  };
  pool.Submit(Priority::kBackground, task("b1"));
  pool.Submit(Priority::kNormal, task("n1"));
  pool.Submit(Priority::kUrgent, task("u1"));
  pool.Submit(Priority::kBackground, task("b2"));
  pool.Submit(Priority::kNormal, task("n2"));
  pool.Submit(Priority::kUrgent, task("u2"));
  EXPECT_EQ(pool.Queued(Priority::kUrgent), 2u);
  EXPECT_EQ(pool.Queued(Priority::kNormal), 2u);
  EXPECT_EQ(pool.Queued(Priority::kBackground), 2u);
  std::promise<void> done;
  pool.Submit(Priority::kBackground, [&] { done.set_value(); });
  release.set_value();
  done.get_future().wait();
  EXPECT_EQ(order, (std::vector<std::string>{"u1", "u2", "n1", "n2", "b1", "b2"}));
}

TEST(IoPoolTest, StopDropsQueuedTasksAndLaterSubmits) {
  std::atomic<int> ran{0};
  IoPool pool(1);
  std::promise<void> release, started;
  std::shared_future<void> released = release.get_future().share();
  pool.Submit(Priority::kUrgent, [&] {
    started.set_value();
    released.wait();
    ++ran;
  });
  started.get_future().wait();
  for (Priority p : {Priority::kUrgent, Priority::kNormal, Priority::kBackground}) {
    pool.Submit(p, [&] { ++ran; });
  }
  std::thread stopper([&] { pool.Stop(); });
  // Stop drops the queue first, then waits for the running task.
  while (pool.Queued(Priority::kUrgent) + pool.Queued(Priority::kNormal) +
             pool.Queued(Priority::kBackground) >
         0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  release.set_value();
  stopper.join();
  pool.Submit(Priority::kUrgent, [&] { ++ran; });
  EXPECT_EQ(ran.load(), 1);  // Only the task already running.
}

}  // namespace
}  // namespace kvstrata
