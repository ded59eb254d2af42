// ConnectionWriter on a real Unix socket pair: a completion frame decodes to the completion
// (docs/wire-protocol.md, "Job frames"), a long error is cut, nothing is written after Close,
// and a socket without room gets no byte of a completion (it goes to the queue instead of
// waiting for a slow reader, and the peer never sees a torn frame).
#include "daemon/rpc/fast_path/connection_writer.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <thread>

#include "absl/time/clock.h"
#include "daemon/rpc/fast_path/job_wire.h"
#include "daemon/rpc/fast_path/lookup_wire.h"
#include "gtest/gtest.h"

namespace kvstrata {
namespace {

class ConnectionWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds_), 0);
    timeval timeout{1, 0};
    setsockopt(fds_[0], SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  }
  void TearDown() override {
    close(fds_[0]);
    if (fds_[1] >= 0) close(fds_[1]);
  }
  // Everything the peer can read now.
  std::string Drain() {
    std::string got;
    char buf[65536];
    for (;;) {
      ssize_t n = recv(fds_[1], buf, sizeof(buf), MSG_DONTWAIT);
      if (n <= 0) return got;
      got.append(buf, static_cast<size_t>(n));
    }
  }
  int fds_[2] = {-1, -1};
};

JobCompletion Failed(std::string error) {
  JobCompletion c;
  c.job_id = 1234567890123ULL;
  c.kind = JobCompletion::Kind::kStore;
  c.failed_blocks = {0, 7, 65535};
  c.error = std::move(error);
  c.elapsed = absl::Microseconds(2500);
  return c;
}

TEST_F(ConnectionWriterTest, ACompletionFrameCarriesTheCompletion) {
  ConnectionWriter writer(fds_[0]);
  ASSERT_TRUE(writer.Deliver(42, Failed("copy failed")));
  std::string frame = Drain();
  ASSERT_EQ(frame.size(), job_wire::kCompletionHeaderBytes + 3 * 4 + 11);
  EXPECT_EQ(frame.substr(0, 4), "KVSC");
  job_wire::CompletionHeader h = job_wire::DecodeCompletionHeader(frame.data());
  EXPECT_EQ(h.magic, job_wire::kCompletionMagic);
  EXPECT_EQ(h.kind, job_wire::kKindStore);
  EXPECT_EQ(h.reserved, 0u);
  EXPECT_EQ(h.session_id, 42u);
  EXPECT_EQ(h.job_id, 1234567890123ULL);
  EXPECT_EQ(h.elapsed_us, 2500u);
  EXPECT_EQ(h.failed_count, 3u);
  EXPECT_EQ(h.error_bytes, 11u);
  uint32_t failed[3];
  const char* at = frame.data() + job_wire::kCompletionHeaderBytes;
  for (uint32_t& f : failed) at = lookup_wire::internal::Get(at, &f);
  EXPECT_EQ(failed[0], 0u);
  EXPECT_EQ(failed[1], 7u);
  EXPECT_EQ(failed[2], 65535u);
  EXPECT_EQ(std::string(at, 11), "copy failed");

  JobCompletion ok;  // A load that moved every block: no tail.
  ok.job_id = 9;
  ok.kind = JobCompletion::Kind::kLoad;
  ASSERT_TRUE(writer.Deliver(42, ok));
  frame = Drain();
  ASSERT_EQ(frame.size(), job_wire::kCompletionHeaderBytes);
  h = job_wire::DecodeCompletionHeader(frame.data());
  EXPECT_EQ(h.kind, job_wire::kKindLoad);
  EXPECT_EQ(h.failed_count + h.error_bytes, 0u);
}

TEST_F(ConnectionWriterTest, ALongErrorIsCut) {
  std::string frame = ConnectionWriter::EncodeCompletion(
      1, Failed(std::string(3 * lookup_wire::kMaxMessageBytes, 'e')));
  job_wire::CompletionHeader h = job_wire::DecodeCompletionHeader(frame.data());
  EXPECT_EQ(h.error_bytes, lookup_wire::kMaxMessageBytes);
  EXPECT_EQ(frame.size(), job_wire::kCompletionHeaderBytes + 3 * 4 + lookup_wire::kMaxMessageBytes);
}

TEST_F(ConnectionWriterTest, NothingIsWrittenAfterClose) {
  ConnectionWriter writer(fds_[0]);
  ASSERT_TRUE(writer.Send("answer"));
  writer.Close();
  EXPECT_FALSE(writer.Send("late answer"));
  EXPECT_FALSE(writer.Deliver(1, Failed("x")));
  EXPECT_EQ(Drain(), "answer");
}

TEST_F(ConnectionWriterTest, ASocketWithoutRoomGetsNoByteOfACompletion) {
  int small = 4096;
  setsockopt(fds_[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
  std::string filler(1024, 'f');
  size_t filled = 0;
  for (;;) {  // Fill the socket until the kernel takes no more.
    ssize_t n = send(fds_[0], filler.data(), filler.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n <= 0) {
      ASSERT_TRUE(errno == EAGAIN || errno == EWOULDBLOCK) << std::strerror(errno);
      break;
    }
    filled += static_cast<size_t>(n);
  }
  ConnectionWriter writer(fds_[0]);
  EXPECT_FALSE(writer.Deliver(3, Failed("no room")));  // Returns at once: the queue gets it.
  std::string got = Drain();
  EXPECT_EQ(got.size(), filled);
  EXPECT_EQ(got.find("KVSC"), std::string::npos);
  ASSERT_TRUE(writer.Deliver(3, Failed("room again")));  // The reader caught up.
  EXPECT_EQ(Drain().substr(0, 4), "KVSC");
}

// An answer waiting for room in a full socket (a reader that stopped reading) holds the
// writer: a completion then goes to the queue at once instead of waiting behind it.
TEST_F(ConnectionWriterTest, ACompletionDoesNotWaitBehindAStalledAnswer) {
  int small = 4096;
  setsockopt(fds_[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
  ConnectionWriter writer(fds_[0]);
  std::thread answer([&] { writer.Send(std::string(1 << 20, 'a')); });  // Stalls (1 s).
  absl::SleepFor(absl::Milliseconds(100));
  const absl::Time start = absl::Now();
  EXPECT_FALSE(writer.Deliver(1, Failed("behind a stalled answer")));
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(50));
  answer.join();  // SO_SNDTIMEO (1 s here) gave up on the answer and shut the connection.
  EXPECT_FALSE(writer.Deliver(1, Failed("after")));
}

// A refusal to a connection about to be closed (Send with timeout 0) never waits for room.
TEST_F(ConnectionWriterTest, ASendThatMayNotWaitGivesUpAtOnce) {
  int small = 4096;
  setsockopt(fds_[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
  ConnectionWriter writer(fds_[0]);
  const absl::Time start = absl::Now();
  EXPECT_FALSE(writer.Send(std::string(1 << 20, 'r'), /*timeout_ms=*/0));
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(500));  // SO_SNDTIMEO is 1 s here.
  EXPECT_FALSE(writer.Send("after"));                       // The connection was shut down.
}

TEST_F(ConnectionWriterTest, AGonePeerTakesNothing) {
  close(fds_[1]);
  fds_[1] = -1;
  ConnectionWriter writer(fds_[0]);
  EXPECT_FALSE(writer.Deliver(1, Failed("gone")));
  EXPECT_FALSE(writer.Send("answer"));
}

}  // namespace
}  // namespace kvstrata
