// Default locations shared by the daemon and its clients, so both agree without a config.
//
// Socket: $KVSTRATA_SOCKET, else $RUNTIME_DIRECTORY/kvstrata.sock (systemd), else
// $XDG_RUNTIME_DIR/kvstrata/kvstrata.sock, else /tmp/kvstrata-<uid>/kvstrata.sock.
// A local tier's directory (the default l2's): $XDG_CACHE_HOME/kvstrata/<label>, else
// $HOME/.cache/kvstrata/<label>, else /var/tmp/kvstrata-<uid>/<label>. Thread-safe (reads
// the environment only).
#ifndef KVSTRATA_DAEMON_COMMON_RUNTIME_PATHS_H_
#define KVSTRATA_DAEMON_COMMON_RUNTIME_PATHS_H_

#include <string>

#include "absl/strings/string_view.h"

namespace kvstrata {

std::string DefaultSocketPath();
std::string DefaultTierPath(absl::string_view label);

// "unix:///abs/path" for a path; "host:port" and "unix:..." are returned unchanged.
std::string EndpointToTarget(const std::string& endpoint);

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_COMMON_RUNTIME_PATHS_H_
