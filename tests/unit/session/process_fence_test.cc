// ProcessFence with real processes: a forked child that connected to our Unix socket is
// identified by its pidfd, runs (also while stopped), and is reported once it exits.
#include "daemon/session/process_fence.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace kvstrata {
namespace {

// A child process that connected to a Unix socket of ours (the peer credentials of a
// connection are the connecting process's; a socketpair's would be ours); it waits until
// killed.
class Child {
 public:
  Child() {
    int listener = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    // Abstract address (leading NUL): nothing on disk to clean up.
    std::string name = "kvs-fence-test-" + std::to_string(getpid()) + "-" + std::to_string(next_++);
    std::memcpy(addr.sun_path + 1, name.data(), name.size());
    socklen_t length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
    EXPECT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), length), 0);
    EXPECT_EQ(listen(listener, 1), 0);
    pid_ = fork();
    if (pid_ == 0) {
      int fd = socket(AF_UNIX, SOCK_STREAM, 0);
      if (connect(fd, reinterpret_cast<sockaddr*>(&addr), length) != 0) _exit(1);
      for (;;) pause();
    }
    ours_ = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    EXPECT_GE(ours_, 0);
    close(listener);
  }
  ~Child() {
    if (pid_ > 0) Kill();
    close(ours_);
  }
  int connection() const { return ours_; }
  void Signal(int signal) { kill(pid_, signal); }
  void Kill() {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  static inline int next_ = 0;
  pid_t pid_ = -1;
  int ours_ = -1;
};

std::vector<uint64_t> ExitedWithin(ProcessFence& fence, absl::Duration limit) {
  absl::Time deadline = absl::Now() + limit;
  std::vector<uint64_t> exited;
  while (exited.empty() && absl::Now() < deadline) {
    exited = fence.Exited();
    if (exited.empty()) absl::SleepFor(absl::Milliseconds(5));
  }
  return exited;
}

TEST(ProcessFenceTest, UntrackedSessionsMayNotWrite) {
  ProcessFence fence;
  EXPECT_FALSE(fence.MayWrite(7));
  EXPECT_TRUE(fence.Exited().empty());
}

TEST(ProcessFenceTest, PeerIsIdentifiedAndFencedUntilItExits) {
  Child child;
  int pidfd = ProcessFence::PeerPidfd(child.connection());
  ASSERT_GE(pidfd, 0) << "neither SO_PEERPIDFD nor SO_PEERCRED + pidfd_open identified the peer";
  ProcessFence fence;
  fence.Track(7, pidfd);
  EXPECT_TRUE(fence.MayWrite(7));
  child.Signal(SIGSTOP);  // A paused process may still write once it resumes.
  EXPECT_TRUE(fence.MayWrite(7));
  EXPECT_TRUE(fence.Exited().empty());
  child.Signal(SIGCONT);
  child.Kill();
  EXPECT_FALSE(fence.MayWrite(7));
  EXPECT_EQ(ExitedWithin(fence, absl::Seconds(5)), std::vector<uint64_t>{7});
  EXPECT_EQ(fence.size(), 0u);
  EXPECT_FALSE(fence.MayWrite(7));
}

TEST(ProcessFenceTest, SessionWithTwoProcessesRunsUntilBothExit) {
  Child first, second;
  ProcessFence fence;
  fence.Track(9, ProcessFence::PeerPidfd(first.connection()));
  fence.Track(9, ProcessFence::PeerPidfd(second.connection()));
  first.Kill();
  EXPECT_TRUE(fence.MayWrite(9));
  EXPECT_TRUE(fence.Exited().empty());
  second.Kill();
  EXPECT_EQ(ExitedWithin(fence, absl::Seconds(5)), std::vector<uint64_t>{9});
}

TEST(ProcessFenceTest, UnknownPeerIsFencedForever) {
  ProcessFence fence;
  fence.Track(3, -1);
  EXPECT_TRUE(fence.MayWrite(3));
  EXPECT_TRUE(fence.Exited().empty());
  fence.Forget(3);
  EXPECT_FALSE(fence.MayWrite(3));
}

TEST(ProcessFenceTest, NotASocketHasNoPeer) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  EXPECT_EQ(ProcessFence::PeerPidfd(fds[0]), -1);
  close(fds[0]);
  close(fds[1]);
}

}  // namespace
}  // namespace kvstrata
