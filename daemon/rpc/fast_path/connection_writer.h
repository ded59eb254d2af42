// The write side of one fast-path connection (FastPathServer). The connection's own thread
// sends its answers through Send; the JobManager hands it the completions of the
// connection's version-2 job frames (daemon/rpc/fast_path/job_wire.h) from whichever thread
// finished the job. Frames are written whole, one at a time (a mutex held while writing).
// Deliver never waits for a slow reader before the first byte: when the socket has no room,
// or another frame is being written (an answer waiting for room), it writes nothing and
// answers false, and the JobManager queues the completion instead. A completion that went
// out in part is finished within kCompletionRestTimeoutMs (an answer within the socket's
// SO_SNDTIMEO); if that fails the connection is shut down, so the peer sees a broken
// connection, not a torn frame, and the completion goes to the queue.
// Thread-safe. Does not own the fd: its connection thread calls Close before the fd is
// closed, and every later Send / Deliver answers false.
#ifndef KVSTRATA_DAEMON_RPC_FAST_PATH_CONNECTION_WRITER_H_
#define KVSTRATA_DAEMON_RPC_FAST_PATH_CONNECTION_WRITER_H_

#include <string>
#include <string_view>

#include "daemon/common/mutex.h"
#include "daemon/jobs/completion_sink.h"

namespace kvstrata {

class ConnectionWriter final : public CompletionSink {
 public:
  static constexpr int kCompletionRestTimeoutMs = 100;

  explicit ConnectionWriter(int fd) : fd_(fd) {}

  // Writes all of `bytes`, waiting for room up to `timeout_ms` at a time (-1: the socket's
  // SO_SNDTIMEO; 0: not at all); false when the peer is gone or stalled (the connection is
  // then shut down), or after Close.
  bool Send(std::string_view bytes, int timeout_ms = -1);
  // A completion frame for the job (see the header comment).
  bool Deliver(SessionId session, const JobCompletion& completion) override;
  void Close();

  // The completion frame of job_wire.h for `completion` (its error cut to
  // lookup_wire::kMaxMessageBytes).
  static std::string EncodeCompletion(SessionId session, const JobCompletion& completion);

 private:
  // Deliver's write of a completion frame.
  bool DeliverLocked(std::string_view frame) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes the rest of `bytes` after `sent` of them went out, waiting for room up to
  // `timeout_ms` at a time (-1: the socket's SO_SNDTIMEO); shuts the connection down when it
  // cannot. Call holding mu_.
  bool Finish(std::string_view bytes, size_t sent, int timeout_ms = -1)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int fd_;
  Mutex mu_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_RPC_FAST_PATH_CONNECTION_WRITER_H_
