// C++ client of the fast path (OpenSessionResponse.lookup_socket; frames in
// daemon/rpc/fast_path/lookup_wire.h, docs/wire-protocol.md): one persistent Unix-socket
// connection, connected on first use and again after it was lost. Answers are those of
// Control.Lookup; a daemon error comes back as its absl::Status (NOT_FOUND for an unknown
// session, FAILED_PRECONDITION for another session's namespace, ...). INVALID_ARGUMENT
// before sending for keys of different lengths or out of range, UNAVAILABLE when the
// daemon cannot be reached or drops the connection, DATA_LOSS for a malformed answer.
// A call polls for its answer for up to 250 us before blocking in read, while at most half
// the process's CPUs' worth of calls are in flight (daemon/common/spin_wait.h).
// Thread-safe (calls on one client are serialised; give each thread its own for speed).
#ifndef KVSTRATA_CLIENT_CPP_LOOKUP_CLIENT_H_
#define KVSTRATA_CLIENT_CPP_LOOKUP_CLIENT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "daemon/common/mutex.h"
#include "kvstrata/v1/common.pb.h"

namespace kvstrata {

struct FastLookupOptions {
  bool acquire_lease = false;
  uint32_t lease_ttl_ms = 0;  // 0: the daemon's default; clamped to its maximum.
};

struct FastLookupResult {
  uint32_t hit_blocks = 0;
  std::vector<v1::Tier> tiers;  // One per hit.
  uint64_t lease_id = 0;        // 0 when no lease was taken.
  uint64_t lease_expires_unix_ms = 0;
};

class LookupClient {
 public:
  // `timeout` bounds connecting and each call. Does not connect yet.
  explicit LookupClient(std::string socket_path, absl::Duration timeout = absl::Seconds(5));
  ~LookupClient();
  LookupClient(const LookupClient&) = delete;
  LookupClient& operator=(const LookupClient&) = delete;

  // Every key must have the same length, 1..32 bytes; 1..65536 keys.
  absl::StatusOr<FastLookupResult> Lookup(uint64_t session_id, uint32_t namespace_id,
                                          absl::Span<const std::string> keys,
                                          FastLookupOptions options = {});
  // Same, into `result` (its vector is reused: no allocation once warm).
  absl::Status LookupInto(uint64_t session_id, uint32_t namespace_id,
                          absl::Span<const std::string> keys, FastLookupOptions options,
                          FastLookupResult* result);

 private:
  absl::Status ConnectLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DisconnectLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ReadReplyLocked(FastLookupResult* result) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string socket_path_;
  const absl::Duration timeout_;
  Mutex mu_;
  int fd_ ABSL_GUARDED_BY(mu_) = -1;
  std::string frame_ ABSL_GUARDED_BY(mu_);  // Reused request / reply buffer.
};

}  // namespace kvstrata

#endif  // KVSTRATA_CLIENT_CPP_LOOKUP_CLIENT_H_
