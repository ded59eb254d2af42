#include "daemon/session/session_registry.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace kvstrata {
namespace {

class RecordingListener : public SessionEndListener {
 public:
  void OnSessionEnded(uint64_t id) override { ended.push_back(id); }
  std::vector<uint64_t> ended;
};

class SessionRegistryTest : public ::testing::Test {
 protected:
  SessionRegistryTest()
      : registry_(SessionLimits{absl::Seconds(10), absl::Seconds(60), 3}, [this] { return now_; }) {
    registry_.AddListener(&listener_);
  }
  absl::Time now_ = absl::FromUnixSeconds(1000);
  RecordingListener listener_;
  SessionRegistry registry_;
};

TEST_F(SessionRegistryTest, OpenHeartbeatClose) {
  auto session = registry_.Open(kDefaultTenant, "vllm-worker", 42, "node-1", absl::ZeroDuration());
  ASSERT_TRUE(session.ok());
  EXPECT_NE(session->id, 0u);
  EXPECT_EQ(session->heartbeat_timeout, absl::Seconds(10));
  EXPECT_TRUE(registry_.Heartbeat(session->id, kDefaultTenant).ok());
  EXPECT_TRUE(registry_.Close(session->id, kDefaultTenant).ok());
  EXPECT_EQ(listener_.ended, std::vector<uint64_t>{session->id});
  EXPECT_EQ(registry_.Heartbeat(session->id, kDefaultTenant).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(registry_.Close(session->id, kDefaultTenant).code(), absl::StatusCode::kNotFound);
}

TEST_F(SessionRegistryTest, AnotherTenantsSessionIsUnknown) {
  constexpr TenantId kA = 1, kB = 2;
  auto a = registry_.Open(kA, "a", 1, "h", absl::ZeroDuration());
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->tenant, kA);
  EXPECT_EQ(registry_.Check(a->id, kB).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(registry_.Heartbeat(a->id, kB).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(registry_.Close(a->id, kB).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(registry_.Check(a->id, kDefaultTenant).code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(registry_.Check(a->id, kA).ok());  // B's close did not end it
  auto b = registry_.Open(kB, "b", 2, "h", absl::ZeroDuration());
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(registry_.List(kA).size(), 1u);
  EXPECT_EQ(registry_.List(kA)[0].id, a->id);
  EXPECT_EQ(registry_.List().size(), 2u);
  EXPECT_TRUE(registry_.Close(a->id, kA).ok());
}

TEST_F(SessionRegistryTest, MissedHeartbeatsExpire) {
  auto a = registry_.Open(kDefaultTenant, "a", 1, "h", absl::Seconds(2));
  auto b = registry_.Open(kDefaultTenant, "b", 2, "h", absl::ZeroDuration());
  now_ += absl::Seconds(1);
  ASSERT_TRUE(registry_.Heartbeat(a->id, kDefaultTenant).ok());
  now_ += absl::Seconds(2.5);
  EXPECT_EQ(registry_.ExpireStale(), std::vector<uint64_t>{a->id});
  EXPECT_EQ(registry_.Check(a->id, kDefaultTenant).code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(registry_.Check(b->id, kDefaultTenant).ok());
  now_ += absl::Seconds(10);
  EXPECT_EQ(registry_.ExpireStale(), std::vector<uint64_t>{b->id});
  EXPECT_EQ(listener_.ended.size(), 2u);
}

TEST_F(SessionRegistryTest, HeartbeatRunsWhileLiveOnlyForALiveSession) {
  auto a = registry_.Open(kDefaultTenant, "a", 1, "h", absl::Seconds(2));
  int runs = 0;
  auto count = [&] {
    ++runs;
    return absl::OkStatus();
  };
  now_ += absl::Seconds(1.5);
  ASSERT_TRUE(registry_.Heartbeat(a->id, kDefaultTenant, count).ok());
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(registry_.Heartbeat(a->id, 7, count).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(runs, 1);
  // An error of while_live is answered and the heartbeat does not count.
  now_ += absl::Seconds(1.5);
  EXPECT_EQ(registry_
                .Heartbeat(a->id, kDefaultTenant,
                           [] { return absl::InvalidArgumentError("bad counters"); })
                .code(),
            absl::StatusCode::kInvalidArgument);
  now_ += absl::Seconds(1);  // 2.5 s since the last counted heartbeat
  EXPECT_EQ(registry_.ExpireStale(), std::vector<uint64_t>{a->id});
  EXPECT_EQ(registry_.Heartbeat(a->id, kDefaultTenant, count).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(runs, 1);
}

TEST_F(SessionRegistryTest, HeartbeatTimeoutIsClamped) {
  EXPECT_EQ(registry_.Open(kDefaultTenant, "a", 1, "h", absl::Milliseconds(1))->heartbeat_timeout,
            absl::Milliseconds(100));
  EXPECT_EQ(registry_.Open(kDefaultTenant, "b", 1, "h", absl::Hours(5))->heartbeat_timeout,
            absl::Seconds(60));
}

TEST_F(SessionRegistryTest, BadInputAndLimits) {
  EXPECT_EQ(registry_.Open(kDefaultTenant, "", 1, "h", absl::ZeroDuration()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry_.Open(kDefaultTenant, std::string(129, 'x'), 1, "h", absl::ZeroDuration())
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry_.Open(kDefaultTenant, "a", 1, std::string(256, 'h'), absl::ZeroDuration())
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(registry_.Open(kDefaultTenant, "a", 1, "h", absl::ZeroDuration()).ok());
  EXPECT_EQ(registry_.Open(kDefaultTenant, "a", 1, "h", absl::ZeroDuration()).status().code(),
            absl::StatusCode::kResourceExhausted);
  registry_.CloseAll();
  EXPECT_EQ(registry_.size(), 0u);
  EXPECT_EQ(listener_.ended.size(), 3u);
}

TEST(SessionRegistryConcurrencyTest, ParallelOpenHeartbeatCloseAndExpire) {
  SessionRegistry registry(SessionLimits{absl::Milliseconds(100), absl::Seconds(1), 100000});
  std::atomic<int> opened{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 500; ++i) {
        auto s = registry.Open(kDefaultTenant, "c", 1, "h", absl::ZeroDuration());
        ASSERT_TRUE(s.ok());
        ++opened;
        (void)registry.Heartbeat(s->id, kDefaultTenant);
        if (i % 2 == 0) (void)registry.Close(s->id, kDefaultTenant);
      }
    });
  }
  threads.emplace_back([&] {
    for (int i = 0; i < 200; ++i) registry.ExpireStale();
  });
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(opened.load(), 2000);
  EXPECT_LE(registry.size(), 1000u);
}

}  // namespace
}  // namespace kvstrata
