// Listening Unix stream sockets for the daemon's side channels (the shared-memory fd
// hand-off, the fast path). Thread-safe (no state).
#ifndef KVSTRATA_DAEMON_COMMON_UNIX_LISTENER_H_
#define KVSTRATA_DAEMON_COMMON_UNIX_LISTENER_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace kvstrata {

// A listening socket (SOCK_CLOEXEC) bound at `path` (a stale file there is replaced) with
// permissions `mode`. INVALID_ARGUMENT for a path too long for sun_path, UNAVAILABLE when
// it cannot be bound.
absl::StatusOr<int> ListenUnix(const std::string& path, uint32_t mode);

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_COMMON_UNIX_LISTENER_H_
