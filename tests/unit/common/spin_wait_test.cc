#include "daemon/common/spin_wait.h"

#include <sys/socket.h>
#include <unistd.h>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace kvstrata {
namespace {

class SpinWaitTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds_), 0); }
  void TearDown() override {
    for (int fd : fds_) {
      if (fd >= 0) close(fd);
    }
  }
  int fds_[2] = {-1, -1};
};

TEST_F(SpinWaitTest, DataAlreadyThereIsSeenAndLeftInTheSocket) {
  ASSERT_EQ(write(fds_[1], "x", 1), 1);
  EXPECT_TRUE(SpinUntilReadable(fds_[0], absl::Seconds(5), 1));
  char byte = 0;
  ASSERT_EQ(read(fds_[0], &byte, 1), 1);  // Peeked, not consumed.
  EXPECT_EQ(byte, 'x');
}

TEST_F(SpinWaitTest, NothingArrivingEndsAfterTheBudget) {
  absl::Time start = absl::Now();
  EXPECT_FALSE(SpinUntilReadable(fds_[0], absl::Milliseconds(20), 1));
  absl::Duration waited = absl::Now() - start;
  EXPECT_GE(waited, absl::Milliseconds(20));
  EXPECT_LT(waited, absl::Seconds(2));
}

TEST_F(SpinWaitTest, ClosedPeerOrBadDescriptorDoesNotSpin) {
  close(fds_[1]);
  fds_[1] = -1;
  EXPECT_TRUE(SpinUntilReadable(fds_[0], absl::Seconds(5), 1));  // EOF: read won't block.
  EXPECT_TRUE(SpinUntilReadable(-1, absl::Seconds(5), 1));       // EBADF: read fails at once.
}

TEST_F(SpinWaitTest, TooManyContendersOrNoBudgetBlockAtOnce) {
  absl::Time start = absl::Now();
  EXPECT_FALSE(SpinUntilReadable(fds_[0], absl::Seconds(5), 1 << 20));
  EXPECT_FALSE(SpinUntilReadable(fds_[0], absl::ZeroDuration(), 1));
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
}

}  // namespace
}  // namespace kvstrata
