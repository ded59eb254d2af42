// Default locations shared by the daemon and its clients, so both agree without a config.
//
// Socket: $KVSTRATA_SOCKET, else $RUNTIME_DIRECTORY/kvstrata.sock (systemd), else
// $XDG_RUNTIME_DIR/kvstrata/kvstrata.sock, else /tmp/kvstrata-<uid>/kvstrata.sock.
// L2 directory: $XDG_CACHE_HOME/kvstrata/l2, else $HOME/.cache/kvstrata/l2, else
// /var/tmp/kvstrata-<uid>/l2. Thread-safe (reads the environment only).
#ifndef KVSTRATA_DAEMON_COMMON_RUNTIME_PATHS_H_
#define KVSTRATA_DAEMON_COMMON_RUNTIME_PATHS_H_

#include <string>

namespace kvstrata {

std::string DefaultSocketPath();
std::string DefaultL2Path();

// "unix:///abs/path" for a path; "host:port" and "unix:..." are returned unchanged.
std::string EndpointToTarget(const std::string& endpoint);

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_COMMON_RUNTIME_PATHS_H_
