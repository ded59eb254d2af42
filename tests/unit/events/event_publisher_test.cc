#include "daemon/events/event_publisher.h"

#include <unistd.h>
#include <zmq.h>

#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/events/kv_event_listener.h"
#include "gtest/gtest.h"

namespace kvstrata {
namespace {

uint64_t BigEndian64(const std::string& bytes) {
  uint64_t v = 0;
  for (char c : bytes) v = (v << 8) | static_cast<uint8_t>(c);
  return v;
}

// A libzmq socket receiving whole multipart messages, for the tests.
class TestSocket {
 public:
  // Connects to `endpoint`, or with `bind` binds it (as llm-d's global-socket SUB does).
  TestSocket(int type, const std::string& endpoint, bool bind = false) {
    ctx_ = zmq_ctx_new();
    socket_ = zmq_socket(ctx_, type);
    int timeout_ms = 1000;
    zmq_setsockopt(socket_, ZMQ_RCVTIMEO, &timeout_ms, sizeof(timeout_ms));
    if (type == ZMQ_SUB) zmq_setsockopt(socket_, ZMQ_SUBSCRIBE, "kv@", 3);
    if (bind) {
      EXPECT_EQ(zmq_bind(socket_, endpoint.c_str()), 0);
    } else {
      EXPECT_EQ(zmq_connect(socket_, endpoint.c_str()), 0);
    }
  }
  // The endpoint actually bound (the port a "tcp://127.0.0.1:*" bind picked).
  std::string LastEndpoint() {
    char buf[256] = {};
    size_t size = sizeof(buf);
    zmq_getsockopt(socket_, ZMQ_LAST_ENDPOINT, buf, &size);
    return buf;
  }
  ~TestSocket() {
    zmq_close(socket_);
    zmq_ctx_term(ctx_);
  }
  std::vector<std::string> Receive() {
    std::vector<std::string> frames;
    int more = 1;
    while (more) {
      zmq_msg_t msg;
      zmq_msg_init(&msg);
      if (zmq_msg_recv(&msg, socket_, 0) < 0) return frames;
      frames.emplace_back(static_cast<char*>(zmq_msg_data(&msg)), zmq_msg_size(&msg));
      more = zmq_msg_more(&msg);
      zmq_msg_close(&msg);
    }
    return frames;
  }
  void Send(const std::vector<std::string>& frames) {
    for (size_t i = 0; i < frames.size(); ++i) {
      zmq_send(socket_, frames[i].data(), frames[i].size(),
               i + 1 < frames.size() ? ZMQ_SNDMORE : 0);
    }
  }

 private:
  void* ctx_;
  void* socket_;
};

class EventPublisherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/kvs-events-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    options_.endpoint = absl::StrCat("ipc://", dir_, "/pub");
    options_.replay_endpoint = absl::StrCat("ipc://", dir_, "/replay");
    options_.pod_id = "node-a";
    options_.flush_interval = absl::Milliseconds(5);
  }
  void TearDown() override {
    unlink((dir_ + "/pub").c_str());
    unlink((dir_ + "/replay").c_str());
    rmdir(dir_.c_str());
  }
  static std::optional<NamespaceFacts> Resolve(NamespaceId ns) {
    if (ns == 1) return NamespaceFacts{"llama", 16};
    return std::nullopt;
  }
  std::string dir_;
  EventPublisherOptions options_;
};

TEST_F(EventPublisherTest, PublishesThreeFramesWithSequenceAndReplays) {
  auto publisher = EventPublisher::Start(options_, Resolve);
  ASSERT_TRUE(publisher.ok()) << publisher.status();
  TestSocket sub(ZMQ_SUB, options_.endpoint);
  // A SUB socket joins asynchronously: publish until the first message arrives.
  std::vector<std::string> first;
  for (int i = 0; i < 200 && first.empty(); ++i) {
    (*publisher)->Push({KvEventKind::kBlockStored, 1, Tier::kL1, 42});
    absl::SleepFor(absl::Milliseconds(20));
    first = sub.Receive();
  }
  ASSERT_EQ(first.size(), 3u);
  EXPECT_EQ(first[0], "kv@node-a@llama");
  ASSERT_EQ(first[1].size(), 8u);
  uint64_t seq = BigEndian64(first[1]);
  std::vector<std::string> next;
  (*publisher)->Push({KvEventKind::kBlockRemoved, 1, Tier::kL1, 42});
  do {
    next = sub.Receive();
    ASSERT_EQ(next.size(), 3u);
  } while (BigEndian64(next[1]) <= seq);
  EXPECT_EQ(BigEndian64(next[1]), seq + 1);

  TestSocket replay(ZMQ_DEALER, options_.replay_endpoint);
  replay.Send({"", std::string(7, '\0') + std::string(1, static_cast<char>(seq))});
  std::vector<std::string> got = replay.Receive();
  ASSERT_EQ(got.size(), 4u);  // "", topic, seq, payload (the identity is stripped), as vLLM's
  EXPECT_EQ(got[0], "");
  EXPECT_EQ(got[1], "kv@node-a@llama");
  EXPECT_EQ(BigEndian64(got[2]), seq);
  EXPECT_EQ(got[3], first[2]);  // the payload as published
  got = replay.Receive();
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(BigEndian64(got[2]), seq + 1);
  got = replay.Receive();
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[1], "");                      // end marker: no topic,
  EXPECT_EQ(got[2], std::string(8, '\xff'));  // -1,
  EXPECT_EQ(got[3], "");                      // no payload

  replay.Send({"", "bad"});  // a malformed request gets only the end marker
  got = replay.Receive();
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[2], std::string(8, '\xff'));
  EXPECT_GE((*publisher)->Stats().replay_requests, 2u);
}

// llm-d's router parses the topic as strings.Split(topic, "@") == [kv, pod, model].
std::vector<std::string> SplitTopic(const std::string& topic) {
  std::vector<std::string> parts(1);
  for (char c : topic) {
    if (c == '@') {
      parts.emplace_back();
    } else {
      parts.back() += c;
    }
  }
  return parts;
}

// The node-wide topic in llm-d's global-socket mode: the router's SUB binds
// (kvEventsConfig.zmqEndpoint), the daemon's PUB connects to it; stores, removals and the
// clear of every tier go out under "kv@node:<node>@<model>", and the replay socket answers
// with the same topic.
TEST_F(EventPublisherTest, NodeWideTopicToABoundSubscriberAndReplay) {
  TestSocket router(ZMQ_SUB, "tcp://127.0.0.1:*", /*bind=*/true);
  options_.endpoint = router.LastEndpoint();  // no "*": the publisher connects
  options_.pod_id = "node:gpu-node-7";
  auto publisher = EventPublisher::Start(options_, Resolve);
  ASSERT_TRUE(publisher.ok()) << publisher.status();
  std::vector<std::string> first;  // the connection and subscription travel asynchronously
  for (int i = 0; i < 200 && first.empty(); ++i) {
    (*publisher)->Push({KvEventKind::kBlockStored, 1, Tier::kL1, 7});
    absl::SleepFor(absl::Milliseconds(20));
    first = router.Receive();
  }
  ASSERT_EQ(first.size(), 3u);
  std::vector<std::string> parts = SplitTopic(first[0]);
  ASSERT_EQ(parts.size(), 3u) << first[0];
  EXPECT_EQ(parts[0], "kv");
  EXPECT_EQ(parts[1], "node:gpu-node-7");
  EXPECT_EQ(parts[2], "llama");
  const uint64_t from = BigEndian64(first[1]);

  for (Tier tier : {Tier::kL1, Tier::kL2, Tier::kL3}) {
    (*publisher)->Push({KvEventKind::kBlockStored, 1, tier, 8});
    (*publisher)->Push({KvEventKind::kBlockRemoved, 1, tier, 8});
  }
  (*publisher)->Push({KvEventKind::kAllBlocksCleared, 0, Tier::kL1, 0});
  uint64_t last = from;
  bool cleared = false;
  while (!cleared) {  // the live stream, up to the batch that holds AllBlocksCleared
    std::vector<std::string> message = router.Receive();
    ASSERT_EQ(message.size(), 3u) << "the stream stopped before AllBlocksCleared";
    EXPECT_EQ(message[0], "kv@node:gpu-node-7@llama");
    last = BigEndian64(message[1]);
    for (const KvEventBatch& b : (*publisher)->Read(last, 1, 0).batches) {
      for (const KvEvent& e : b.events) cleared |= e.kind == KvEventKind::kAllBlocksCleared;
    }
  }
  std::vector<std::pair<std::string, std::string>> tiers;  // medium, locality of block 8
  for (const KvEventBatch& b : (*publisher)->Read(from + 1, 100, 0).batches) {
    for (const KvEvent& e : b.events) {
      if (e.block_hashes == std::vector<uint64_t>{8})
        tiers.emplace_back(e.medium, e.locality.value_or(""));
    }
  }
  using Tiers = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(tiers, (Tiers{{"CPU", "LOCAL"},
                          {"CPU", "LOCAL"},
                          {"STORAGE", "LOCAL"},
                          {"STORAGE", "LOCAL"},
                          {"STORAGE", "REMOTE"},
                          {"STORAGE", "REMOTE"}}));

  TestSocket replay(ZMQ_DEALER, options_.replay_endpoint);
  std::string start(8, '\0');
  for (int i = 0; i < 8; ++i) start[i] = static_cast<char>(from >> (56 - 8 * i));
  replay.Send({"", start});
  for (uint64_t seq = from; seq <= last; ++seq) {
    std::vector<std::string> got = replay.Receive();
    ASSERT_EQ(got.size(), 4u);
    EXPECT_EQ(got[1], "kv@node:gpu-node-7@llama");
    EXPECT_EQ(BigEndian64(got[2]), seq);
  }
  EXPECT_EQ(replay.Receive()[2], std::string(8, '\xff'));
}

TEST_F(EventPublisherTest, ConsecutiveNoticesMergeAndUnknownNamespacesStillPublish) {
  options_.endpoint.clear();
  options_.replay_endpoint.clear();
  options_.flush_interval = absl::Seconds(60);  // nothing is flushed before Stop()
  auto publisher = EventPublisher::Start(options_, Resolve);
  ASSERT_TRUE(publisher.ok());
  for (uint64_t h = 1; h <= 3; ++h)
    (*publisher)->Push({KvEventKind::kBlockStored, 1, Tier::kL1, h});
  (*publisher)->Push({KvEventKind::kBlockStored, 1, Tier::kL2, 9});
  (*publisher)->Push({KvEventKind::kBlockStored, 1, Tier::kL3, 9});  // same medium, other locality
  (*publisher)->Push({KvEventKind::kBlockRemoved, 7, Tier::kL1, 5});
  (*publisher)->Stop();
  EventPage page = (*publisher)->Read(0, 10, 0);
  ASSERT_EQ(page.batches.size(), 2u);  // model "llama" and the unknown namespace's ""
  const KvEventBatch& llama = page.batches[0];
  EXPECT_EQ(llama.model, "llama");
  ASSERT_EQ(llama.events.size(), 3u);
  EXPECT_EQ(llama.events[0].block_hashes, (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ(llama.events[0].medium, "CPU");
  EXPECT_EQ(llama.events[0].locality, "LOCAL");
  EXPECT_EQ(llama.events[0].block_size, 16u);
  EXPECT_EQ(llama.events[1].medium, "STORAGE");
  EXPECT_EQ(llama.events[1].locality, "LOCAL");
  EXPECT_EQ(llama.events[2].medium, "STORAGE");
  EXPECT_EQ(llama.events[2].locality, "REMOTE");
  EXPECT_FALSE(llama.events[2].group_idx.has_value());
  EXPECT_EQ(page.batches[1].model, "");
  EXPECT_EQ(page.batches[1].events[0].kind, KvEventKind::kBlockRemoved);
}

// The medium and locality come from the daemon's tier table (issue 45): a tier of a
// [[tiers]] list is labelled as its kind says, whatever its id.
TEST_F(EventPublisherTest, MediumAndLocalityComeFromTheTierTable) {
  options_.endpoint.clear();
  options_.replay_endpoint.clear();
  options_.flush_interval = absl::Seconds(60);
  options_.tiers = TierTable();
  options_.tiers.Add({TierAt(1), "team", "shared-file", "STORAGE", "REMOTE", true, true});
  options_.tiers.Add({TierAt(2), "nvme", "local-file", "STORAGE", "LOCAL", false, true});
  auto publisher = EventPublisher::Start(options_, Resolve);
  ASSERT_TRUE(publisher.ok());
  (*publisher)->Push({KvEventKind::kBlockStored, 1, TierAt(1), 1});
  (*publisher)->Push({KvEventKind::kBlockStored, 1, TierAt(2), 2});
  (*publisher)->Stop();
  EventPage page = (*publisher)->Read(0, 10, 0);
  ASSERT_EQ(page.batches.size(), 1u);
  const std::vector<KvEvent>& events = page.batches[0].events;
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].medium, "STORAGE");
  EXPECT_EQ(events[0].locality, "REMOTE");
  EXPECT_EQ(events[1].locality, "LOCAL");
}

TEST_F(EventPublisherTest, FullQueueDropsAndCounts) {
  options_.endpoint.clear();
  options_.replay_endpoint.clear();
  options_.max_queue_events = 2;
  options_.flush_interval = absl::Seconds(60);
  auto publisher = EventPublisher::Start(options_, Resolve);
  ASSERT_TRUE(publisher.ok());
  EXPECT_TRUE((*publisher)->Push({KvEventKind::kBlockStored, 1, Tier::kL1, 1}));
  EXPECT_TRUE((*publisher)->Push({KvEventKind::kBlockStored, 1, Tier::kL1, 2}));
  EXPECT_FALSE((*publisher)->Push({KvEventKind::kBlockStored, 1, Tier::kL1, 3}));
  EXPECT_EQ((*publisher)->Stats().dropped_events, 1u);
}

TEST_F(EventPublisherTest, BadEndpointIsAClearError) {
  options_.endpoint = "tcp://*:notaport";
  auto publisher = EventPublisher::Start(options_, Resolve);
  ASSERT_FALSE(publisher.ok());
  EXPECT_EQ(publisher.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(publisher.status().message().find("notaport"), std::string::npos);
}

TEST_F(EventPublisherTest, ListenerPairsRemovalsAndClearsOnlyWhenEmpty) {
  options_.endpoint.clear();
  options_.replay_endpoint.clear();
  options_.flush_interval = absl::Seconds(60);
  auto publisher = EventPublisher::Start(options_, Resolve);
  ASSERT_TRUE(publisher.ok());
  KvEventListener listener(publisher->get());
  BlockKey a = *BlockKey::Make(1, "aaaaaaaa");
  BlockKey b = *BlockKey::Make(1, "bbbbbbbb");
  listener.OnStored(1, a, Tier::kL1);
  listener.OnStored(1, b, Tier::kL1);
  listener.OnRemoved(1, a, Tier::kL1, RemovalCause::kCleared);  // b is still there
  listener.OnRemoved(1, b, Tier::kL1, RemovalCause::kCleared);  // now nothing is left
  EXPECT_EQ(listener.live_blocks(), 0);
  (*publisher)->Stop();
  EventPage page = (*publisher)->Read(0, 10, 0);
  ASSERT_EQ(page.batches.size(), 1u);
  const std::vector<KvEvent>& events = page.batches[0].events;
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].kind, KvEventKind::kBlockStored);
  EXPECT_EQ(events[0].block_hashes,
            (std::vector<uint64_t>{ExternalBlockHash("aaaaaaaa"), ExternalBlockHash("bbbbbbbb")}));
  EXPECT_EQ(events[1].kind, KvEventKind::kBlockRemoved);
  EXPECT_EQ(events[1].block_hashes.size(), 2u);
  EXPECT_EQ(events[2].kind, KvEventKind::kAllBlocksCleared);
}

}  // namespace
}  // namespace kvstrata
