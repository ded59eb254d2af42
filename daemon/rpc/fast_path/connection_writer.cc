#include "daemon/rpc/fast_path/connection_writer.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

#include "absl/time/time.h"
#include "daemon/rpc/fast_path/job_wire.h"
#include "daemon/rpc/fast_path/lookup_wire.h"

namespace kvstrata {

std::string ConnectionWriter::EncodeCompletion(SessionId session, const JobCompletion& completion) {
  job_wire::CompletionHeader h;
  h.kind =
      completion.kind == JobCompletion::Kind::kStore ? job_wire::kKindStore : job_wire::kKindLoad;
  h.session_id = session;
  h.job_id = completion.job_id;
  h.elapsed_us =
      static_cast<uint64_t>(std::max<int64_t>(0, absl::ToInt64Microseconds(completion.elapsed)));
  std::string_view error = completion.error;
  error = error.substr(0, lookup_wire::kMaxMessageBytes);
  h.failed_count = static_cast<uint32_t>(completion.failed_blocks.size());
  h.error_bytes = static_cast<uint32_t>(error.size());
  std::string frame(job_wire::kCompletionHeaderBytes + h.failed_count * 4 + error.size(), '\0');
  job_wire::EncodeCompletionHeader(h, frame.data());
  char* at = frame.data() + job_wire::kCompletionHeaderBytes;
  for (uint32_t index : completion.failed_blocks) {
    at = lookup_wire::internal::Put(at, index);
  }
  std::copy(error.begin(), error.end(), at);
  return frame;
}

bool ConnectionWriter::Send(std::string_view bytes, int timeout_ms) {
  MutexLock lock(&mu_);
  if (closed_) return false;
  return Finish(bytes, 0, timeout_ms);
}

bool ConnectionWriter::Deliver(SessionId session, const JobCompletion& completion) {
  std::string frame = EncodeCompletion(session, completion);
  // Another frame being written (an answer that waits for room) means a slow reader: the
  // thread that finished the job does not wait for it.
  if (!mu_.TryLock()) return false;
  const bool delivered = DeliverLocked(frame);
  mu_.Unlock();
  return delivered;
}

bool ConnectionWriter::DeliverLocked(std::string_view frame) {
  if (closed_) return false;
  ssize_t n;
  do {
    n = send(fd_, frame.data(), frame.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  if (n <= 0) return false;  // No room now, or the peer is gone: nothing of it was written.
  return Finish(frame, static_cast<size_t>(n), kCompletionRestTimeoutMs);
}

bool ConnectionWriter::Finish(std::string_view bytes, size_t sent, int timeout_ms) {
  bytes.remove_prefix(sent);
  while (!bytes.empty()) {
    const int flags = MSG_NOSIGNAL | (timeout_ms >= 0 ? MSG_DONTWAIT : 0);
    ssize_t n = send(fd_, bytes.data(), bytes.size(), flags);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && timeout_ms >= 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd room{fd_, POLLOUT, 0};
      if (poll(&room, 1, timeout_ms) > 0) continue;
    }
    if (n <= 0) {  // Gone or stalled past the limit: no later frame may follow a torn one.
      shutdown(fd_, SHUT_RDWR);
      closed_ = true;
      return false;
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

void ConnectionWriter::Close() {
  MutexLock lock(&mu_);
  closed_ = true;
}

}  // namespace kvstrata
